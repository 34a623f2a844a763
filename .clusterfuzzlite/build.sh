#!/bin/bash -eu
# Builds every cargo-fuzz target of fuzz/ into $OUT, each with its seed corpus (fuzz/seeds/).
cd "$SRC/cmtwin/fuzz"
cargo fuzz build -O --debug-assertions
for target in call_sequences fault_plans cm_model verbs_sequences; do
  cp "target/x86_64-unknown-linux-gnu/release/$target" "$OUT/"
  if compgen -G "seeds/$target/*" > /dev/null; then
    zip -jq "$OUT/${target}_seed_corpus.zip" "seeds/$target/"*
  fi
done
