//! indicatif bars behind the library's [`Progress`] trait when stderr is a terminal; otherwise
//! (a pipe, a batch job's log file) a plain `progress:` line on stderr every [`PLAIN_EVERY`] at
//! most, so a long stage in a cluster job's log shows how far it is.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use freshstack::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a step's plain progress line is logged when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(30);

/// A progress bar per step on a terminal; plain periodic log lines elsewhere.
pub struct Bars {
    current: Mutex<ProgressBar>,
    plain: Option<Mutex<Plain>>,
}

/// The step being counted for plain log lines.
struct Plain {
    label: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_line: Instant,
}

impl Plain {
    fn line(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            self.done as f64 / secs
        } else {
            0.0
        };
        match self.total {
            Some(total) if total > 0 => {
                let left = total.saturating_sub(self.done) as f64;
                let eta = if rate > 0.0 {
                    left / rate
                } else {
                    f64::INFINITY
                };
                format!(
                    "{}: {}/{} ({:.1}%), {:.1}/s, {:.0} s elapsed, ~{:.0} s left",
                    self.label,
                    self.done,
                    total,
                    100.0 * self.done as f64 / total as f64,
                    rate,
                    secs,
                    eta
                )
            }
            _ => format!(
                "{}: {} done, {:.1}/s, {:.0} s elapsed",
                self.label, self.done, rate, secs
            ),
        }
    }
}

impl Bars {
    pub fn new() -> Self {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Self {
            current: Mutex::new(ProgressBar::hidden()),
            plain: (!terminal).then(|| {
                Mutex::new(Plain {
                    label: String::new(),
                    total: None,
                    done: 0,
                    started: Instant::now(),
                    last_line: Instant::now(),
                })
            }),
        }
    }
}

impl Progress for Bars {
    fn begin(&self, label: &str, total: Option<u64>) {
        if let Some(Ok(mut plain)) = self.plain.as_ref().map(|p| p.lock()) {
            let now = Instant::now();
            *plain = Plain {
                label: label.to_string(),
                total,
                done: 0,
                started: now,
                last_line: now,
            };
        }
        let bar = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        let template = if total.is_some() {
            "{msg:>24} [{bar:40}] {human_pos}/{human_len} ({per_sec}, {eta})"
        } else {
            "{msg:>24} {spinner} {human_pos} ({per_sec})"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        if let Ok(mut current) = self.current.lock() {
            *current = bar;
        }
    }

    fn advance(&self, units: u64) {
        if let Ok(bar) = self.current.lock() {
            bar.inc(units);
        }
        if let Some(Ok(mut plain)) = self.plain.as_ref().map(|p| p.lock()) {
            plain.done += units;
            if plain.last_line.elapsed() >= PLAIN_EVERY {
                plain.last_line = Instant::now();
                eprintln!("progress: {}", plain.line());
            }
        }
    }

    fn finish(&self) {
        if let Ok(bar) = self.current.lock() {
            bar.finish_and_clear();
        }
    }
}
