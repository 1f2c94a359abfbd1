//! indicatif bars behind the library's [`Progress`] trait; drawn only when stderr is a terminal.

use std::sync::Mutex;
use std::time::Duration;

use freshstack::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar per step, on stderr, hidden when stderr is not a terminal.
pub struct Bars {
    current: Mutex<ProgressBar>,
}

impl Bars {
    pub fn new() -> Self {
        Self {
            current: Mutex::new(ProgressBar::hidden()),
        }
    }
}

impl Progress for Bars {
    fn begin(&self, label: &str, total: Option<u64>) {
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
    }

    fn finish(&self) {
        if let Ok(bar) = self.current.lock() {
            bar.finish_and_clear();
        }
    }
}
