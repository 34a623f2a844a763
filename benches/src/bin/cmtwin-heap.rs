//! Heap of the simulator, counted by an instrumented system allocator: live bytes per connected
//! id with `n` connections ESTABLISHED (both sides), and allocations per full RC lifecycle.
//! A separate program so that the allocator's counting costs nothing in the timed runs; the
//! engine report runs it and reads its output, one `measure,n,value,unit` line per figure.
//!
//! Usage: `cmtwin-heap [N...]` (default: 1000 10000).

use std::alloc::System;
use std::process::ExitCode;

use cmtwin_benches::lifecycle::{run_lifecycles, Probe};
use cmtwin_benches::topology::bench_fabric;
use stats_alloc::{Region, Stats, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocator counters at the two probe points of a run.
#[derive(Default)]
struct HeapProbe {
    at_start: Option<Stats>,
    at_established: Option<Stats>,
}

impl Probe for HeapProbe {
    fn started(&mut self) {
        self.at_start = Some(GLOBAL.stats());
    }

    fn all_established(&mut self) {
        self.at_established = Some(GLOBAL.stats());
    }
}

/// Bytes requested and not yet freed. `stats_alloc` counts a reallocation's growth in
/// `bytes_allocated` and its shrinking in `bytes_deallocated` (its `bytes_reallocated` is the
/// same net change again, so adding it would count every grown buffer twice).
fn live(s: &Stats) -> i128 {
    s.bytes_allocated as i128 - s.bytes_deallocated as i128
}

fn measure(n: usize) -> Result<(), String> {
    let fabric = bench_fabric(11);
    let mut probe = HeapProbe::default();
    let region = Region::new(GLOBAL);
    let counts = run_lifecycles(&fabric, n, Some(&mut probe)).map_err(|e| e.to_string())?;
    let whole = region.change();
    let (Some(start), Some(established)) = (probe.at_start, probe.at_established) else {
        return Err(format!(
            "n = {n}: the run never had all connections established"
        ));
    };
    if counts.lifecycles != n as u64 {
        return Err(format!(
            "n = {n}: only {} lifecycles completed",
            counts.lifecycles
        ));
    }
    let lifecycles = counts.lifecycles as f64;
    let connected_ids = 2.0 * n as f64;
    let held = live(&established) - live(&start);
    println!(
        "heap_per_connected_id,{n},{:.1},B",
        held as f64 / connected_ids
    );
    println!(
        "allocs_per_lifecycle,{n},{:.1},allocs",
        whole.allocations as f64 / lifecycles
    );
    println!(
        "reallocs_per_lifecycle,{n},{:.1},reallocs",
        whole.reallocations as f64 / lifecycles
    );
    println!(
        "bytes_allocated_per_lifecycle,{n},{:.0},B",
        whole.bytes_allocated as f64 / lifecycles
    );
    Ok(())
}

fn main() -> ExitCode {
    let sizes: Result<Vec<usize>, _> = std::env::args().skip(1).map(|a| a.parse()).collect();
    let sizes = match sizes {
        Ok(s) if s.is_empty() => vec![1000, 10_000],
        Ok(s) if s.contains(&0) => {
            eprintln!("cmtwin-heap: 0 is not a connection count");
            return ExitCode::FAILURE;
        }
        Ok(s) => s,
        Err(e) => {
            eprintln!("cmtwin-heap: connection counts must be numbers: {e}");
            return ExitCode::FAILURE;
        }
    };
    for n in sizes {
        if let Err(e) = measure(n) {
            eprintln!("cmtwin-heap: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
