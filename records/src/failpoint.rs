//! Fault injection for crash tests: `SHALE_FAILPOINTS=name[,name…]` makes the process
//! abort (no unwinding, no flush: like SIGKILL) when it reaches a failpoint of that
//! name. Inert when the variable is unset, which is how production runs.

use std::sync::OnceLock;

fn enabled() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        std::env::var("SHALE_FAILPOINTS")
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Aborts the process here if `name` is enabled.
pub fn hit(name: &str) {
    if enabled().iter().any(|n| n == name) {
        eprintln!("failpoint {name} hit: aborting");
        std::process::abort();
    }
}
