//! The committed fuzzing corpus (`fuzz/corpus/TARGET/`: real seed inputs and the inputs the
//! campaign found interesting, docs/reliability.md) and every input that once crashed a parser
//! (`fuzz/regressions/TARGET/`), fed through the same entry points the fuzzers call: no input may
//! panic. Errors are expected (most inputs are garbage).

use std::path::Path;

use freshstack::fuzz::{Scratch, Target, run};

fn run_dir(target: Target, dir: &Path, scratch: &Scratch) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in &paths {
        let data = std::fs::read(path).unwrap();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(target, &data, scratch)));
        assert!(outcome.is_ok(), "{}: panicked", path.display());
    }
    paths.len()
}

#[test]
fn committed_fuzz_corpus_runs_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let scratch = Scratch::new().unwrap();
    for target in Target::ALL {
        let seeds = run_dir(target, &root.join("corpus").join(target.name()), &scratch);
        assert!(seeds > 0, "{}: no committed corpus", target.name());
        run_dir(
            target,
            &root.join("regressions").join(target.name()),
            &scratch,
        );
    }
}
