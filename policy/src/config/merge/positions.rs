//! The machine + project rule for a top-level secret's `in:` (README, "Secrets"): a project entry
//! that omits `in` keeps the machine's positions; one that writes `in` must list a subset of them,
//! and its list then applies. A machine secret without `in` holds every `header:` and `query:`
//! position, and `body` exactly when it says `body: true`.
//!
//! Uses the model and the merge's [`Layers`].

use super::Layers;
use crate::config::ConfigError;
use crate::config::model::{Located, SecretConfig, place};
use crate::secret_position::SecretPosition;

/// A project entry `project` for machine secret `machine`: its positions, when it writes `in` and
/// they are a subset of the machine's; `None` when it writes none (the machine's stand) or widens
/// (errors pushed).
pub(super) fn narrow(
    machine: &SecretConfig,
    project: &SecretConfig,
    layers: &Layers,
    errors: &mut Vec<ConfigError>,
) -> Option<Vec<Located<SecretPosition>>> {
    let Layers {
        upper,
        upper_file,
        lower,
        lower_file,
        ..
    } = *layers;
    let wanted = project.positions.as_ref()?;
    let before = errors.len();
    for p in wanted {
        let allowed = match &machine.positions {
            Some(list) => list.iter().any(|m| m.value.same_place(&p.value)),
            None => p.value != SecretPosition::Body || machine.body,
        };
        if allowed {
            continue;
        }
        let machine_has = match &machine.positions {
            Some(list) => format!(
                "its positions there are {} ({})",
                crate::secret_position::list(
                    &list.iter().map(|m| m.value.clone()).collect::<Vec<_>>()
                ),
                place(&list[0].at)
            ),
            None => format!(
                "it has no `in` and no `body: true` there ({})",
                place(&machine.at)
            ),
        };
        errors.push(ConfigError {
            at: Some(p.at.clone()),
            message: format!(
                "the {lower} lets {upper} secret `{}` be swapped in `{}`, which the {upper_file} \
                 does not: {machine_has}",
                project.name, p.value
            ),
            hint: Some(format!(
                "a {lower_file} can only narrow a {upper} secret's positions: list a subset of \
                 the {upper}'s `in`, or change the {upper_file} if you mean it"
            )),
        });
    }
    (errors.len() == before).then(|| wanted.clone())
}
