//! `keel-bench completions bash|zsh|fish`: a completion script written
//! from the flag table ([`FLAGS`]), so it offers exactly the flags each
//! subcommand accepts, the choices of the flags that have a fixed set, and
//! file names where a file is expected.

use std::fmt::Write as _;

use crate::flags::{Shell, Subcommand, FLAGS};

/// The fixed choices of a flag, if it has them.
fn choices(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "protocol" => "udp rudp kcp",
        "address-family" => "ipv4 ipv6",
        "io-model" => "shared sharded",
        "channel" => "reliable-ordered reliable-unordered unreliable-sequenced unreliable",
        "kcp-mode" => "fast default normal",
        "format" => "json human both",
        "lane-steering" => "auto hash port",
        "full-policy" => "refuse evict-idlest",
        "idle-timeout" => "off",
        "impair" | "impair-server" => "off",
        _ => return None,
    })
}

/// Flags whose value is a file or directory.
fn is_path(flag: &str) -> bool {
    matches!(flag, "output" | "histogram" | "out")
}

/// `--a --b ...`: the flags `sub` accepts.
fn flags_of(sub: Subcommand) -> String {
    FLAGS
        .iter()
        .filter(|f| f.accepted_by(sub))
        .map(|f| format!("--{}", f.name))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The subcommand words.
fn words() -> String {
    Subcommand::ALL
        .iter()
        .map(|s| s.word())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The script for `shell`.
pub fn script(shell: Shell) -> String {
    match shell {
        Shell::Bash => bash(),
        Shell::Zsh => format!(
            "#compdef keel-bench\n# keel-bench completions for zsh, through bash's \
             (bashcompinit).\nautoload -U +X bashcompinit && bashcompinit\n{}",
            bash()
        ),
        Shell::Fish => fish(),
    }
}

fn bash() -> String {
    let mut s = String::from(
        "# keel-bench completions for bash (keel-bench completions bash)\n\
         _keel_bench() {\n  \
         local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\" sub=\"\"\n  \
         if [[ $COMP_CWORD -gt 1 ]]; then\n    \
         case \"${COMP_WORDS[1]}\" in serve|report|compare|completions) sub=\"${COMP_WORDS[1]}\";; esac\n  \
         fi\n  \
         case \"$prev\" in\n",
    );
    for f in FLAGS.iter().filter(|f| !f.is_switch()) {
        if let Some(c) = choices(f.name) {
            let _ = writeln!(
                s,
                "    --{}) COMPREPLY=($(compgen -W \"{c}\" -- \"$cur\")); return;;",
                f.name
            );
        } else if is_path(f.name) {
            let _ = writeln!(
                s,
                "    --{}) COMPREPLY=($(compgen -f -- \"$cur\")); return;;",
                f.name
            );
        } else {
            let _ = writeln!(s, "    --{}) return;;", f.name);
        }
    }
    s.push_str("  esac\n  local opts\n  case \"$sub\" in\n");
    for sub in Subcommand::ALL {
        let word = match sub.word() {
            "" => "\"\"",
            w => w,
        };
        let extra = match sub {
            Subcommand::Run => format!(" {}", words()),
            Subcommand::Completions => " bash zsh fish".to_string(),
            _ => String::new(),
        };
        let _ = writeln!(s, "    {word}) opts=\"{}{extra}\";;", flags_of(sub));
    }
    s.push_str(
        "  esac\n  \
         if [[ \"$cur\" != -* && ( \"$sub\" == report || \"$sub\" == compare ) ]]; then\n    \
         COMPREPLY=($(compgen -f -- \"$cur\")); return\n  \
         fi\n  \
         COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n}\n\
         complete -F _keel_bench keel-bench\n",
    );
    s
}

fn fish() -> String {
    let mut s = String::from("# keel-bench completions for fish (keel-bench completions fish)\n");
    let all = words();
    let _ = writeln!(
        s,
        "complete -c keel-bench -n \"not __fish_seen_subcommand_from {all}\" -f -a \"{all}\""
    );
    let _ = writeln!(
        s,
        "complete -c keel-bench -n \"__fish_seen_subcommand_from completions\" -f -a \"bash zsh fish\""
    );
    for f in FLAGS {
        let subs: Vec<&str> = Subcommand::ALL
            .iter()
            .filter(|sub| f.accepted_by(**sub))
            .map(|sub| sub.word())
            .collect();
        let condition = if subs.len() == Subcommand::ALL.len() {
            String::new()
        } else {
            let named: Vec<&str> = subs.iter().copied().filter(|w| !w.is_empty()).collect();
            let run = subs.contains(&"");
            match (run, named.is_empty()) {
                (true, true) => format!(" -n \"not __fish_seen_subcommand_from {all}\""),
                (true, false) => format!(
                    " -n \"not __fish_seen_subcommand_from {all}; or __fish_seen_subcommand_from {}\"",
                    named.join(" ")
                ),
                (false, _) => format!(" -n \"__fish_seen_subcommand_from {}\"", named.join(" ")),
            }
        };
        let value = if f.is_switch() {
            String::new()
        } else if let Some(c) = choices(f.name) {
            format!(" -x -a \"{c}\"")
        } else if is_path(f.name) {
            " -r -F".to_string()
        } else {
            " -x".to_string()
        };
        let what: String = f
            .help
            .split(['(', ';'])
            .next()
            .unwrap_or("")
            .trim()
            .replace('"', "'")
            .chars()
            .take(70)
            .collect();
        let _ = writeln!(
            s,
            "complete -c keel-bench{condition} -l {}{value} -d \"{what}\"",
            f.name
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_name_every_flag_and_subcommand() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let s = script(shell);
            for f in FLAGS {
                let named = match shell {
                    Shell::Fish => format!(" -l {} ", f.name),
                    _ => format!("--{}", f.name),
                };
                assert!(s.contains(&named), "{shell:?}: --{}", f.name);
            }
            for w in ["serve", "report", "compare", "completions"] {
                assert!(s.contains(w), "{shell:?}: {w}");
            }
        }
        assert!(script(Shell::Bash).ends_with("complete -F _keel_bench keel-bench\n"));
        assert!(script(Shell::Zsh).starts_with("#compdef keel-bench\n"));
        assert!(
            script(Shell::Bash).contains("--protocol) COMPREPLY=($(compgen -W \"udp rudp kcp\"")
        );
    }
}
