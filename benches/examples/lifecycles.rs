//! `lifecycles N WAVES`: runs WAVES waves of N full RC lifecycles (the engine report's workload)
//! and prints the CPU time per lifecycle; a fixed workload for `perf stat` and `perf record`.

use cmtwin_benches::cpu;
use cmtwin_benches::lifecycle::run_lifecycles;
use cmtwin_benches::topology::bench_fabric;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let waves: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let mut total = std::time::Duration::ZERO;
    for wave in 0..waves {
        let fabric = bench_fabric(1000 + wave);
        let (counts, spent) = cpu::measure(|| run_lifecycles(&fabric, n, None));
        let counts = counts.expect("lifecycles");
        assert_eq!(counts.lifecycles, n as u64);
        total += spent;
    }
    let lifecycles = n as f64 * waves as f64;
    println!(
        "n={n} waves={waves} cpu_us_per_lifecycle={:.3}",
        total.as_secs_f64() * 1e6 / lifecycles
    );
}
