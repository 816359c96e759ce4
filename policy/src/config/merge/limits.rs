//! The machine + project rule for `limits` (README, "Limits"): the entries of both files apply,
//! the first match of each file, each with its own counters. So a project can add limits and
//! tighten, never loosen or remove the machine's. A project entry that is looser than the machine
//! entry which counts the same tools (the machine's first entry overlapping it, when that one
//! covers it) would never be reached: it is an error naming both values.
//!
//! Uses the model, `units` and the merge's [`Layers`].

use super::Layers;
use crate::config::ConfigError;
use crate::config::model::{Origin, ToolLimit, place};
use crate::config::units::{show_duration, show_size};
use crate::config::yaml::push_key;

/// The limits of a machine server a project entry narrows: the machine's entries, then the
/// project's (marked as such). A project entry looser than the machine entry that counts the same
/// tools is an error for each value it loosens.
pub(super) fn narrow(
    server: &str,
    machine: &[ToolLimit],
    project: &[ToolLimit],
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) -> Vec<ToolLimit> {
    let Layers {
        upper,
        upper_file,
        lower,
        ..
    } = *layers;
    for p in project {
        // The machine entry that applies to every tool `p` matches, when there is one.
        let Some(m) = machine.iter().find(|m| m.tool.overlaps(&p.tool)) else {
            continue;
        };
        if !p.tool.is_covered_by(&m.tool) {
            continue;
        }
        let mut looser: Vec<(&str, String, String)> = Vec::new();
        if let (Some(pr), Some(mr)) = (p.rate, m.rate)
            && pr.is_looser_than(mr)
        {
            looser.push(("rate", pr.to_string(), mr.to_string()));
        }
        if let (Some(pc), Some(mc)) = (p.concurrency, m.concurrency)
            && pc > mc
        {
            looser.push(("concurrency", pc.to_string(), mc.to_string()));
        }
        if let (Some(pt), Some(mt)) = (p.timeout, m.timeout)
            && pt > mt
        {
            looser.push(("timeout", show_duration(pt), show_duration(mt)));
        }
        if let (Some(ps), Some(ms)) = (p.max_response, m.max_response)
            && ps > ms
        {
            looser.push(("max_response", show_size(ps), show_size(ms)));
        }
        for (kind, tried, kept) in looser {
            let mut at = p.at.clone();
            push_key(&mut at.key, kind);
            errors.push(ConfigError {
                at: Some(at),
                message: format!(
                    "the {lower} sets `{kind}: {tried}` for `{}` on {upper} server `{server}`, \
                     looser than the {upper}'s `{kind}: {kept}` for `{}` ({})",
                    p.tool,
                    m.tool,
                    place(&m.at)
                ),
                hint: Some(format!(
                    "a {lower} can only tighten a {upper} server's limits: both files' limits \
                     apply, so this one would never be reached; write a tighter value, or change \
                     the {upper_file}"
                )),
            });
        }
    }
    machine
        .iter()
        .cloned()
        .chain(project.iter().cloned().map(|mut l| {
            // The mark tells the project's key paths from the machine's in a rule's name.
            l.project_on_machine = layers.lower_origin == Origin::Project;
            l
        }))
        .collect()
}
