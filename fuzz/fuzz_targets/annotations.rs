//! `cargo fuzz run annotations`: see fuzz/run-campaign.sh.
#![no_main]

use std::sync::OnceLock;

use freshstack::fuzz::{Scratch, Target, run};
use libfuzzer_sys::fuzz_target;

static SCRATCH: OnceLock<Scratch> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let scratch = SCRATCH.get_or_init(|| Scratch::new().expect("scratch directory"));
    let _ = run(Target::parse("annotations").expect("a target"), data, scratch);
});
