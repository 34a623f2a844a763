//! The README's fault-plan example is `tests/user_property.rs` (compiled and run by
//! `cargo test`) word for word.

#[test]
fn the_readme_shows_the_compiled_example() {
    let readme = include_str!("../../README.md");
    let example = include_str!("user_property.rs");
    let shown = example
        .find("use cmtwin::Transport;")
        .map(|at| &example[at..])
        .expect("the example's first use line");
    let block = format!("```rust,ignore\n{shown}```");
    assert!(
        readme.contains(&block),
        "README.md must show tests/user_property.rs from its first `use` on"
    );
    assert!(readme.starts_with(
        "# cmtwin\n\nRun the quickstart on the simulator (no RDMA needed): `cargo run --example pingpong`\n"
    ));
    assert!(
        readme.contains("cargo run -p cmtwin-sim --bin cmtwin-sweep -- --seeds 1000 --shard 1/4")
    );
}
