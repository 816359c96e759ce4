//! Fuzzes the config loader with arbitrary text as both machine and project file: it must never panic
//! and must answer quickly (alias bombs and deep nesting are refused by budget).
#![no_main]

use fenzi_policy::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let split = text.find("\n---\n").unwrap_or(text.len());
    let (machine, project) = text.split_at(split);
    let _ = config::load(Some((machine, "mcp.yaml")), Some((project, "fenzi.yaml")));
    if let Ok(cfg) = config::parse(text, "fenzi.yaml", config::Origin::Project) {
        let _ = fenzi_policy::engine::Policy::from_config(&cfg);
    }
});
