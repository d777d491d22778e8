//! The instruction-count benchmarks' program: `counts BENCHMARK INPUT... SCRATCH` runs one
//! benchmark of `_kinetrace::counts` once and prints what it did. `benches/counts.py` runs
//! it under Valgrind, one benchmark a process, and compares the counts with its baseline.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_none_or(|a| a == "--list") {
        for (name, _, what) in _kinetrace::counts::BENCHMARKS {
            println!("{name}\t{what}");
        }
        return ExitCode::SUCCESS;
    }
    let (Some(name), Some(scratch)) = (args.first(), args.last()) else {
        unreachable!("args has a first element")
    };
    if args.len() < 3 {
        eprintln!("usage: counts BENCHMARK INPUT... SCRATCH (or --list)");
        return ExitCode::from(2);
    }
    match _kinetrace::counts::run(name, &args[1..args.len() - 1], Path::new(scratch)) {
        Ok(done) => {
            println!("{name}: {done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("counts: {e}");
            ExitCode::FAILURE
        }
    }
}
