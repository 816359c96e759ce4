//! `fenzi init`: a commented policy for the folder, from its files and `.mcp.json`, that passes
//! `fenzi check`, is printed but not written with `--dry-run`, and never overwrites anything.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Folder(tempfile::TempDir);

impl Folder {
    fn new(files: &[(&str, &str)]) -> Folder {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("xdg")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        Folder(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn fenzi(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_fenzi"))
            .args(args)
            .current_dir(self.path())
            .env("XDG_CONFIG_HOME", self.path().join("xdg"))
            .env("HOME", self.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }

    fn policy(&self) -> PathBuf {
        self.path().join("fenzi.yaml")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const MCP_JSON: &str = r#"{"mcpServers": {
  "deepwiki": {"type": "http", "url": "https://mcp.deepwiki.com/mcp"},
  "linear": {"type": "http", "url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "Bearer lin_real_value"}},
  "gh": {"command": "npx", "args": ["-y", "gh-mcp"], "env": {"GITHUB_TOKEN": "ghp_real_value"}}
}}"#;

#[test]
fn a_project_gets_its_registries_its_agents_key_and_its_servers() {
    let folder = Folder::new(&[
        ("package.json", "{}"),
        ("requirements.txt", ""),
        ("Cargo.toml", ""),
        ("go.mod", "module x\n"),
        ("pom.xml", ""),
        ("build.gradle", ""),
        ("README.md", ""),
        (".mcp.json", MCP_JSON),
    ]);
    let dry = folder.fenzi(&["init", "--agent", "claude", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    assert!(!folder.policy().exists(), "--dry-run wrote the file");
    let printed = text(&dry.stdout);
    assert!(text(&dry.stderr).contains("nothing was written"));

    let out = folder.fenzi(&["init", "--agent", "claude"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(folder.policy()).unwrap();
    assert_eq!(written, printed, "--dry-run prints what init writes");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("then run: fenzi mcp token ANTHROPIC_API_KEY"),
        "{stdout}"
    );
    assert!(
        stdout.contains("then run: fenzi mcp token linear"),
        "{stdout}"
    );
    assert!(
        stdout.contains("then run: fenzi run --agent claude"),
        "{stdout}"
    );
    // No value from .mcp.json is copied.
    assert!(!written.contains("real_value") && !stdout.contains("real_value"));

    // Every host of the ecosystem table for these files, each once, in table order.
    let hosts: Vec<&str> = written
        .lines()
        .filter_map(|l| l.strip_prefix("  - "))
        .collect();
    assert_eq!(
        hosts,
        [
            "registry.npmjs.org",
            "pypi.org",
            "files.pythonhosted.org",
            "index.crates.io",
            "static.crates.io",
            "proxy.golang.org",
            "sum.golang.org",
            "repo.maven.apache.org",
            "plugins.gradle.org",
            "plugins-artifacts.gradle.org",
            "services.gradle.org",
            "downloads.gradle.org",
        ]
    );
    assert!(written.contains("  # npm (package.json): "), "{written}");
    assert!(
        written.contains("  ANTHROPIC_API_KEY:\n    hosts: [api.anthropic.com]\n"),
        "{written}"
    );
    assert!(written.contains("  deepwiki:\n    url: https://mcp.deepwiki.com/mcp\n"));
    assert!(written.contains("  linear:\n    url: https://mcp.linear.app/mcp\n    token: true\n"));
    // A local server whose secret's hosts fenzi cannot know is left out, and said so.
    assert!(!written.contains("  gh:\n"), "{written}");
    assert!(
        written.contains("\n# - gh (.mcp.json): it reads GITHUB_TOKEN"),
        "{written}"
    );
    assert!(stdout.contains("left out MCP server gh"), "{stdout}");

    // It passes `fenzi check`, as the person's CI will run it.
    let check = folder.fenzi(&["check"]);
    assert!(
        check.status.success(),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
}

#[test]
fn it_never_overwrites() {
    let folder = Folder::new(&[("package.json", "{}")]);
    std::fs::write(folder.policy(), "version: 1\n# mine\n").unwrap();
    for args in [
        &["init"][..],
        &["init", "--dry-run"],
        &["init", "--agent", "codex"],
    ] {
        let out = folder.fenzi(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains("never overwrites"),
            "{}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
        assert_eq!(
            std::fs::read_to_string(folder.policy()).unwrap(),
            "version: 1\n# mine\n"
        );
    }
    // Not through a link either, dangling or not: nothing is created where it points.
    std::fs::remove_file(folder.policy()).unwrap();
    let target = folder.path().join("elsewhere.yaml");
    std::os::unix::fs::symlink(&target, folder.policy()).unwrap();
    let out = folder.fenzi(&["init"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!target.exists());
}

#[test]
fn an_empty_folder_gets_a_policy_that_allows_nothing_yet() {
    let folder = Folder::new(&[]);
    let out = folder.fenzi(&["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(folder.policy()).unwrap();
    assert!(written.contains("hosts: []\n"), "{written}");
    assert!(written.contains("mcp: {}\n"), "{written}");
    assert!(text(&out.stdout).contains("no package ecosystem found here"));
    assert!(folder.fenzi(&["check"]).status.success());
}

#[test]
fn a_server_that_clashes_with_the_machine_file_is_left_out() {
    // The machine file has a server at the url .mcp.json names: one server per host:port.
    let folder = Folder::new(&[(
        ".mcp.json",
        r#"{"mcpServers": {"wiki": {"type": "http", "url": "https://mcp.deepwiki.com/mcp"}}}"#,
    )]);
    std::fs::create_dir_all(folder.path().join("xdg/fenzi")).unwrap();
    std::fs::write(
        folder.path().join("xdg/fenzi/mcp.yaml"),
        "version: 1\nmcp:\n  deepwiki:\n    url: https://mcp.deepwiki.com/mcp\n    tools:\n      allow: [read_wiki_structure]\n",
    )
    .unwrap();
    let out = folder.fenzi(&["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("left out MCP server wiki"), "{stdout}");
    let written = std::fs::read_to_string(folder.policy()).unwrap();
    assert!(
        written.contains("# - wiki (.mcp.json): the policy refuses it"),
        "{written}"
    );
    assert!(folder.fenzi(&["check"]).status.success());
}
