//! One module per subcommand. Each exposes `Args` (clap) and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod approve;
pub mod approve_watch;
pub mod check;
pub mod check_effective;
pub mod completions;
pub mod doctor;
pub mod init;
pub mod log;
pub mod manual;
pub mod mcp;
pub mod proxy;
pub mod run;
