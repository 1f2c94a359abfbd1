//! A mutation fuzzer on stable Rust for the parsers of outside input (`freshstack::fuzz`), for
//! machines without a nightly toolchain or libFuzzer; `fuzz/` holds the `cargo fuzz` targets.
//!
//! ```text
//! cargo run --example fuzz -- TARGET --corpus fuzz/corpus/TARGET \
//!     [--runs N] [--max-secs S] [--seed N] [--save DIR] [--artifacts DIR] \
//!     [--malloc-limit-mb 256] [--rss-limit-mb 1024] [--max-len 65536]
//! ```
//!
//! Blind, not coverage-guided: each input is a corpus entry with 1-4 stacked mutations (bit
//! flips, interesting bytes and integers, deletions, duplications, dictionary tokens, splices,
//! number swaps). As poor man's feedback an input whose outcome (Ok, or the parser's error
//! message with digits dropped) was not seen before joins the pool, and with `--save` the
//! corpus directory. A panic is saved under `--artifacts` and counted; an allocation over
//! `--malloc-limit-mb`, or live heap over `--rss-limit-mb`, saves the input and aborts; an abort
//! in the target (a panic that cannot unwind) saves it as `abort-input`.
//! `RUST_BACKTRACE=1` adds a panic's backtrace to its report.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::ffi::CString;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use freshstack::fuzz::{Scratch, Target, run};

/// The system allocator with a cap on one allocation and on live heap bytes while armed.
struct Capped;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static ARMED: AtomicBool = AtomicBool::new(false);
static MALLOC_LIMIT: AtomicUsize = AtomicUsize::new(256 << 20);
static LIVE_LIMIT: AtomicUsize = AtomicUsize::new(1 << 30);
static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
static OOM_PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
static ABORT_PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

fn over_limit(size: usize) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let live = LIVE.load(Ordering::Relaxed);
    let single = size > MALLOC_LIMIT.load(Ordering::Relaxed);
    if !single && live.saturating_add(size) <= LIVE_LIMIT.load(Ordering::Relaxed) {
        return;
    }
    ARMED.store(false, Ordering::Relaxed);
    // No allocation from here on: raw writes only.
    let message: &[u8] = if single {
        b"\nfuzz: OOM: one allocation over --malloc-limit-mb; input saved to the oom- artifact\n"
    } else {
        b"\nfuzz: OOM: live heap over --rss-limit-mb; input saved to the oom- artifact\n"
    };
    save_input_raw(message, &OOM_PATH);
    std::process::abort();
}

/// SIGABRT while an input runs: a panic that cannot unwind (in a `nounwind` function, such as
/// the standard library's unsafe-precondition checks) aborts the process past `catch_unwind`.
/// The input is saved to the `abort-input` artifact with raw writes, then the default action
/// (the abort) proceeds. The OOM path disarms before it aborts, so its artifact stays its own.
extern "C" fn on_abort(_: libc::c_int) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let message: &[u8] = b"\nfuzz: ABORT (a panic that cannot unwind, or an abort in the target); input saved to the abort-input artifact\n";
    save_input_raw(message, &ABORT_PATH);
}

/// Prints `message` and writes the current input to the artifact `path` names, with raw
/// syscalls only: it runs inside the allocator and inside a signal handler, where allocating
/// or locking is not allowed.
fn save_input_raw(message: &[u8], path: &AtomicPtr<libc::c_char>) {
    // SAFETY: async-signal-safe syscalls on a static message, the current input (alive while
    // armed) and a NUL-terminated path leaked at start-up.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        let path = path.load(Ordering::Relaxed);
        if !path.is_null() {
            let fd = libc::open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644);
            if fd >= 0 {
                let ptr = INPUT_PTR.load(Ordering::Relaxed);
                libc::write(fd, ptr.cast(), INPUT_LEN.load(Ordering::Relaxed));
                libc::close(fd);
            }
        }
    }
}

// SAFETY: forwards to `System`, only counting bytes.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        over_limit(layout.size());
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        over_limit(layout.size());
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            over_limit(new_size - layout.size());
            if new_size > MALLOC_LIMIT.load(Ordering::Relaxed) {
                over_limit(new_size);
            }
        }
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

const TOKENS: &[&[u8]] = &[
    b"<row ",
    b" />",
    b"<posts>",
    b"</posts>",
    b"<?xml version=\"1.0\" encoding=\"utf-8\"?>",
    b"<!DOCTYPE x [<!ENTITY a \"aaaa\">]>",
    b"&amp;",
    b"&lt;",
    b"&#x1F600;",
    b"&#0;",
    b"&#",
    b"<pre><code>",
    b"</code></pre>",
    b"<a href=\"",
    b"<ol><li>",
    b"<table>",
    b"<blockquote>",
    b"<!--",
    b"-->",
    b"<![CDATA[",
    b"]]>",
    b" Body=\"",
    b" Tags=\"|a|b|\"",
    b" PostTypeId=\"1\"",
    b" CreationDate=\"2024-01-01T00:00:00.000\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\":",
    b",",
    b"null",
    b"true",
    b"false",
    b"\\u0000",
    b"\\ud800",
    b"\\",
    b"\n",
    b"\r\n",
    b"\t",
    b"\0",
    b"\xff\xfe",
    b"\xe2\x80",
    b"<think>",
    b"</think>",
    b"```json\n",
    b"```",
    b"~~~",
    b"1. ",
    b"- ",
    b"['a', \"b\"]",
    b"\"query_id\":",
    b"\"doc_id\":",
    b"\"nuggets\":",
    b"\"judgments\":",
    b"\"supported\":",
    b" Q0 ",
    b" 0 ",
    b"GGUF",
    b"\"dtype\":\"F32\"",
    b"\"shape\":[",
    b"\"data_offsets\":[",
    b"\"__metadata__\":",
    b"\x93NUMPY",
    b"'descr': '<f4'",
    b"'shape': (",
    b"'fortran_order': True",
    b"\"format_version\":",
    b"\"files\":[",
    b"\"path\":\"",
    b"\"crc32\":\"",
];

const NUMBERS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"1",
    b"255",
    b"65536",
    b"2147483648",
    b"4294967296",
    b"9223372036854775807",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999999",
    b"1e400",
    b"-1e400",
    b"NaN",
    b"inf",
    b"-0",
    b"0.5",
];

const INTEGERS: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
];

fn mutate(rng: &mut fastrand::Rng, input: &mut Vec<u8>, pool: &[Vec<u8>], max_len: usize) {
    for _ in 0..rng.usize(1..=4) {
        let len = input.len();
        match rng.u8(0..11) {
            0 if len > 0 => input[rng.usize(..len)] ^= 1 << rng.u8(0..8),
            1 if len > 0 => input[rng.usize(..len)] = rng.u8(..),
            2 if len > 0 => {
                let bytes = b"\0\xff\x7f\x80\"<>{}[]\n\\&0;: ,'";
                input[rng.usize(..len)] = bytes[rng.usize(..bytes.len())];
            }
            3 if len > 0 => {
                let width = [1usize, 2, 4, 8][rng.usize(..4)].min(len);
                let at = rng.usize(..=len - width);
                let value = INTEGERS[rng.usize(..INTEGERS.len())].to_le_bytes();
                input[at..at + width].copy_from_slice(&value[..width]);
            }
            4 if len > 0 => {
                let start = rng.usize(..len);
                let end = (start + rng.usize(1..=64.min(len - start).max(1))).min(len);
                input.drain(start..end);
            }
            5 if len > 0 => {
                let start = rng.usize(..len);
                let end = (start + rng.usize(1..=256)).min(len);
                let chunk = input[start..end].to_vec();
                let at = rng.usize(..=len);
                input.splice(at..at, chunk);
            }
            6 => {
                let token = TOKENS[rng.usize(..TOKENS.len())];
                let at = rng.usize(..=len);
                input.splice(at..at, token.iter().copied());
            }
            7 => {
                let at = rng.usize(..=len);
                let bytes: Vec<u8> = (0..rng.usize(1..=16)).map(|_| rng.u8(..)).collect();
                input.splice(at..at, bytes);
            }
            8 if !pool.is_empty() => {
                let other = &pool[rng.usize(..pool.len())];
                let cut = rng.usize(..=len);
                let from = rng.usize(..=other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            9 if len > 0 => input.truncate(rng.usize(..len)),
            10 => {
                // Swap a run of ASCII digits (or insert at random) for an extreme number.
                let number = NUMBERS[rng.usize(..NUMBERS.len())];
                let digits: Vec<usize> = (0..len).filter(|&i| input[i].is_ascii_digit()).collect();
                if digits.is_empty() {
                    let at = rng.usize(..=len);
                    input.splice(at..at, number.iter().copied());
                } else {
                    let start = digits[rng.usize(..digits.len())];
                    let mut end = start;
                    while end < len && input[end].is_ascii_digit() {
                        end += 1;
                    }
                    input.splice(start..end, number.iter().copied());
                }
            }
            _ => {}
        }
    }
    input.truncate(max_len);
}

fn signature(outcome: &Result<(), String>) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match outcome {
        Ok(()) => "ok".hash(&mut hasher),
        Err(message) => message
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(60)
            .collect::<String>()
            .hash(&mut hasher),
    }
    hasher.finish()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

struct Options {
    target: Target,
    corpus: PathBuf,
    runs: u64,
    max_secs: u64,
    seed: u64,
    save: Option<PathBuf>,
    artifacts: PathBuf,
    max_len: usize,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .ok_or("usage: fuzz TARGET --corpus DIR [options]")?;
    let target = Target::parse(&name).ok_or_else(|| {
        let names: Vec<_> = Target::ALL.iter().map(|t| t.name()).collect();
        format!("unknown target {name:?} (targets: {})", names.join(", "))
    })?;
    let mut o = Options {
        target,
        corpus: PathBuf::from("fuzz/corpus").join(name),
        runs: 1_000_000,
        max_secs: u64::MAX,
        seed: 1,
        save: None,
        artifacts: PathBuf::from("fuzz/artifacts").join(target.name()),
        max_len: 64 << 10,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag}: missing value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--corpus" => o.corpus = PathBuf::from(&value),
            "--runs" => o.runs = number()?,
            "--max-secs" => o.max_secs = number()?,
            "--seed" => o.seed = number()?,
            "--save" => o.save = Some(PathBuf::from(&value)),
            "--artifacts" => o.artifacts = PathBuf::from(&value),
            "--max-len" => o.max_len = number()? as usize,
            "--malloc-limit-mb" => {
                MALLOC_LIMIT.store((number()? as usize) << 20, Ordering::Relaxed)
            }
            "--rss-limit-mb" => LIVE_LIMIT.store((number()? as usize) << 20, Ordering::Relaxed),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(o)
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
    };
    let mut pool: Vec<Vec<u8>> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&o.corpus) {
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if let Ok(mut bytes) = std::fs::read(&path) {
                bytes.truncate(o.max_len);
                pool.push(bytes);
            }
        }
    }
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let seeds = pool.len();
    std::fs::create_dir_all(&o.artifacts).expect("create the artifacts directory");
    let oom = CString::new(o.artifacts.join("oom-input").to_string_lossy().into_owned())
        .expect("artifacts path without NUL");
    OOM_PATH.store(oom.into_raw(), Ordering::Relaxed);
    let abort = CString::new(
        o.artifacts
            .join("abort-input")
            .to_string_lossy()
            .into_owned(),
    )
    .expect("artifacts path without NUL");
    ABORT_PATH.store(abort.into_raw(), Ordering::Relaxed);
    // SAFETY: installs a handler that makes only async-signal-safe calls; SA_RESETHAND restores
    // the default action, so the abort that raised the signal still ends the process.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_abort as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
    }
    if let Some(dir) = &o.save {
        std::fs::create_dir_all(dir).expect("create the --save directory");
    }
    let panic_message: &'static Mutex<String> = Box::leak(Box::new(Mutex::new(String::new())));
    let backtraces = std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0");
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut m) = panic_message.lock() {
            *m = info.to_string();
            if backtraces {
                *m += &format!("\n{}", std::backtrace::Backtrace::force_capture());
            }
        }
    }));

    let scratch = Scratch::new().expect("scratch directory");
    let mut rng = fastrand::Rng::with_seed(o.seed);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut panics: HashSet<u64> = HashSet::new();
    let mut saved = 0usize;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut execs: u64 = 0;
    let mut input: Vec<u8> = Vec::new();
    while execs < o.runs && started.elapsed().as_secs() < o.max_secs {
        input.clear();
        if (execs as usize) < seeds {
            input.extend_from_slice(&pool[execs as usize]);
        } else {
            input.extend_from_slice(&pool[rng.usize(..pool.len())]);
            mutate(&mut rng, &mut input, &pool, o.max_len);
        }
        INPUT_PTR.store(input.as_mut_ptr(), Ordering::Relaxed);
        INPUT_LEN.store(input.len(), Ordering::Relaxed);
        let t = Instant::now();
        ARMED.store(true, Ordering::Relaxed);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(o.target, &input, &scratch)
        }));
        ARMED.store(false, Ordering::Relaxed);
        slowest = slowest.max(t.elapsed());
        execs += 1;
        match outcome {
            Ok(result) => {
                if seen.insert(signature(&result)) && (execs as usize) > seeds {
                    if pool.len() < 4096 {
                        pool.push(input.clone());
                    }
                    if let Some(dir) = &o.save
                        && saved < 64
                        && input.len() <= 4096
                    {
                        let path = dir.join(format!("new-{:016x}", fnv(&input)));
                        std::fs::write(path, &input).expect("write to --save");
                        saved += 1;
                    }
                }
            }
            Err(_) => {
                let message = panic_message.lock().map(|m| m.clone()).unwrap_or_default();
                let key = fnv(message.as_bytes());
                if panics.insert(key) {
                    let path = o.artifacts.join(format!("panic-{:016x}", fnv(&input)));
                    std::fs::write(&path, &input).expect("write the artifact");
                    eprintln!("fuzz: PANIC ({}): {message}", path.display());
                }
            }
        }
        if last_report.elapsed() >= Duration::from_secs(30) {
            last_report = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "fuzz: {} execs {execs} ({:.0}/s) outcomes {} pool {} panics {}",
                o.target.name(),
                execs as f64 / secs,
                seen.len(),
                pool.len(),
                panics.len()
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} execs={execs} secs={secs:.0} execs_per_s={:.0} seeds={seeds} outcomes={} saved={saved} \
         distinct_panics={} slowest_ms={}",
        o.target.name(),
        execs as f64 / secs,
        seen.len(),
        panics.len(),
        slowest.as_millis()
    );
    if !panics.is_empty() {
        std::process::exit(1);
    }
}
