//! Loading `fenzi.yaml` and the machine file: strict YAML parsing, validation of every DESIGN.md §2
//! rule, and the machine + project merge. Errors name the file, line, column and key.

pub mod model;

pub use model::*;

use std::fmt;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where; `None` only when the problem has no place (e.g. an empty file).
    pub at: Option<Location>,
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) if at.key.is_empty() => {
                write!(f, "{}:{}:{}: {}", at.file, at.line, at.column, self.message)?
            }
            Some(at) => write!(
                f,
                "{}:{}:{}: {}: {}",
                at.file, at.line, at.column, at.key, self.message
            )?,
            None => f.write_str(&self.message)?,
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Parses and validates one file on its own.
pub fn parse(_text: &str, _file: &str, _origin: Origin) -> Result<Config, ConfigErrors> {
    todo!("config helper")
}

/// Merges the machine file and the project file and runs the checks that span both.
pub fn merge(_machine: Option<Config>, _project: Option<Config>) -> Result<Config, ConfigErrors> {
    todo!("config helper")
}

/// `parse` each given `(text, file name)` and `merge` them.
pub fn load(
    machine: Option<(&str, &str)>,
    project: Option<(&str, &str)>,
) -> Result<Config, ConfigErrors> {
    let machine = machine
        .map(|(t, f)| parse(t, f, Origin::Machine))
        .transpose();
    let project = project
        .map(|(t, f)| parse(t, f, Origin::Project))
        .transpose();
    match (machine, project) {
        (Ok(m), Ok(p)) => merge(m, p),
        (Err(mut a), Err(b)) => {
            a.0.extend(b.0);
            Err(a)
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}
