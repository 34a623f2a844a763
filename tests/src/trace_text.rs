//! Helpers for comparing trace text across fabrics and runs.

/// The trace with the fabric-number part of handles (`id3:7` → `id_:7`, `ch3:1` → `ch_:1`)
/// blanked: two fabrics built in one process get different numbers, everything else of a
/// seed's trace must match.
pub fn without_fabric_numbers(trace: &str) -> String {
    let mut out = String::with_capacity(trace.len());
    let mut rest = trace;
    while let Some(pos) = rest.find(['i', 'c']) {
        let (head, tail) = rest.split_at(pos);
        out.push_str(head);
        let prefix = if tail.starts_with("id") {
            "id"
        } else if tail.starts_with("ch") {
            "ch"
        } else {
            ""
        };
        let after = &tail[prefix.len()..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if !prefix.is_empty() && digits > 0 && after[digits..].starts_with(':') {
            out.push_str(prefix);
            out.push('_');
            rest = &after[digits..];
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The 64-bit FNV-1a digest of `bytes`: stable across platforms and Rust versions, for
/// recording trace digests in files.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
