//! The module graph reads `core ← store ← runtime ← {providers, tools} ← front`, with the leaves `time`, `rng`
//! and `http` beside them, and has no cycle.
//!
//! The graph is built from the source: every `src/**/*.rs` file is a module (`src/runtime/agent.rs` is
//! `runtime::agent`, a `mod.rs` is its folder's module), and each `crate::…`, `super::…` or `self::…` path in it
//! (in a `use` or in code; not in comments or strings, not in `#[cfg(test)]` items) is an arrow to the module the
//! path names — followed through `use` imports and re-exports to the module that defines the item, so
//! `crate::runtime::Warn` is an arrow to the module `Warn` comes from. A module's arrows to its own submodules
//! (declaring them, re-exporting their items) are its structure, not dependencies, and are left out; a
//! submodule's arrows to its parent count.
//!
//! Two checks, each printing the offending path with where each arrow was found:
//! * no cycle between modules (`runtime::agent → runtime::approvals → runtime::deps → runtime::agent` fails);
//! * no arrow against the layers: a module imports only from its own layer or the ones below it (see
//!   [`allowed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path, `::`-separated, `""` for the crate root.
type Module = String;

/// One arrow: from, to, and where it was found (`file:line: path`).
#[derive(Clone, Debug)]
struct Arrow {
    from: Module,
    to: Module,
    at: String,
}

/// What the layer a module's top-level folder belongs to may import (besides itself).
fn allowed(layer: &str) -> Option<&'static [&'static str]> {
    Some(match layer {
        "core" => &[],
        // The leaves: the clock and timer, randomness, HTTP. They use core's error type; time uses rng.
        "rng" => &[],
        // Test builds only: the seed convention of generated tests (tests/README.md); it imports nothing.
        "seeds" => &[],
        "time" => &["rng"],
        "http" => &["core"],
        "store" => &["core", "time", "rng", "http"],
        "runtime" => &["core", "store", "time", "rng", "http"],
        "providers" | "tools" => &["core", "store", "runtime", "time", "rng", "http"],
        "front" => &["core", "store", "runtime", "providers", "tools", "time", "rng", "http"],
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Reading the source.

/// The text with comments (doc comments among them), string literals and character literals blanked out (line
/// breaks kept, so line numbers stay right).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r' && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2])))) && {
            let mut k = i + 1;
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"'
        } {
            // A raw string: r"…", r#"…"#, br#"…"#.
            let mut hashes = 0;
            i += 1;
            while c[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            out.push(' ');
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#') {
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            i += 1;
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('x', '\n', '\u{1F600}'); otherwise a lifetime, kept.
            i += 1;
            if c[i] == '\\' {
                i += 1;
            }
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// A token and its line (1-based).
#[derive(Clone, Debug, PartialEq)]
struct Tok {
    text: String,
    line: usize,
}

fn tokens(stripped: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    for (n, line) in stripped.lines().enumerate() {
        let c: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < c.len() {
            if c[i].is_whitespace() {
                i += 1;
            } else if c[i].is_alphanumeric() || c[i] == '_' {
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                out.push(Tok { text: c[start..i].iter().collect(), line: n + 1 });
            } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
                out.push(Tok { text: "::".into(), line: n + 1 });
                i += 2;
            } else {
                out.push(Tok { text: c[i].to_string(), line: n + 1 });
                i += 1;
            }
        }
    }
    out
}

/// The index just past the bracket that closes the one at `open`.
fn close(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0i32;
    let mut i = open;
    while i < toks.len() {
        match toks[i].text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    toks.len()
}

/// The index just past the item starting at `i` (after its attributes): a `use …;`, a `mod x;`, or an item with a
/// body in braces.
fn skip_item(toks: &[Tok], mut i: usize) -> usize {
    while i + 1 < toks.len() && toks[i].text == "#" && toks[i + 1].text == "[" {
        i = close(toks, i + 1);
    }
    let mut k = i;
    if toks.get(k).is_some_and(|t| t.text == "pub") {
        k += 1;
        if toks.get(k).is_some_and(|t| t.text == "(") {
            k = close(toks, k);
        }
    }
    let is_use = toks.get(k).is_some_and(|t| t.text == "use");
    while i < toks.len() {
        match toks[i].text.as_str() {
            ";" => return i + 1,
            "{" if !is_use => return close(toks, i),
            "(" | "[" | "{" => i = close(toks, i),
            _ => i += 1,
        }
    }
    i
}

/// One path a module names: its segments as written, where, and, for a `use`, the name it binds in the module
/// (which the module's submodules, or anyone for a `pub use`, may name it by).
#[derive(Clone, Debug)]
struct Named {
    segs: Vec<String>,
    line: usize,
    binds: Option<String>,
}

/// The leaves of a use tree starting at `i` (after `use`), with the index past the tree: each full path and the
/// name it binds.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let mut segs = prefix;
    while *i < toks.len() {
        let t = toks[*i].text.as_str();
        match t {
            "::" => *i += 1,
            "{" => {
                *i += 1;
                while *i < toks.len() && toks[*i].text != "}" {
                    use_tree(toks, i, segs.clone(), out);
                    if toks.get(*i).is_some_and(|t| t.text == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "*" => {
                *i += 1;
                out.push((segs, "*".into()));
                return;
            }
            _ => {
                segs.push(t.to_string());
                *i += 1;
                if toks.get(*i).is_some_and(|t| t.text == "::") {
                    continue;
                }
                if segs.len() > 1 && segs.last().is_some_and(|s| s == "self") {
                    segs.pop();
                }
                let mut name = segs.last().cloned().unwrap_or_default();
                if toks.get(*i).is_some_and(|t| t.text == "as") {
                    name = toks.get(*i + 1).map(|t| t.text.clone()).unwrap_or_default();
                    *i += 2;
                }
                out.push((segs, name));
                return;
            }
        }
    }
}

/// Every path a file names outside comments, strings and `#[cfg(test)]` items, and the submodules it declares
/// under `#[cfg(test)]` (left out of the graph with their files).
fn named_paths(text: &str) -> (Vec<Named>, BTreeSet<String>) {
    let toks = tokens(&strip(text));
    let mut out = Vec::new();
    let mut test_mods = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].text.as_str();
        if t == "#" && toks.get(i + 1).is_some_and(|t| t.text == "[") {
            let end = close(&toks, i + 1);
            let attr: Vec<&str> = toks[i + 2..end - 1].iter().map(|t| t.text.as_str()).collect();
            if attr == ["cfg", "(", "test", ")"] {
                let next = skip_item(&toks, end);
                let item: Vec<&str> = toks[end..next].iter().map(|t| t.text.as_str()).collect();
                if let Some(k) = item.iter().position(|t| *t == "mod") {
                    if item.last() == Some(&";") {
                        test_mods.insert(item[k + 1].to_string());
                    }
                }
                i = next;
            } else {
                i = end;
            }
        } else if t == "use" {
            let line = toks[i].line;
            let mut leaves = Vec::new();
            i += 1;
            use_tree(&toks, &mut i, Vec::new(), &mut leaves);
            for (segs, name) in leaves {
                out.push(Named { segs, line, binds: (name != "*").then_some(name) });
            }
        } else if matches!(t, "crate" | "super" | "self")
            && toks.get(i + 1).is_some_and(|t| t.text == "::")
            && (i == 0 || toks[i - 1].text != "::")
        {
            let line = toks[i].line;
            let mut segs = vec![t.to_string()];
            i += 1;
            while toks.get(i).is_some_and(|t| t.text == "::")
                && toks.get(i + 1).is_some_and(|t| t.text.starts_with(|c: char| c.is_alphabetic() || c == '_'))
            {
                segs.push(toks[i + 1].text.clone());
                i += 2;
            }
            out.push(Named { segs, line, binds: None });
        } else {
            i += 1;
        }
    }
    (out, test_mods)
}

// ---------------------------------------------------------------------------------------------------------------
// The graph.

/// The crate's modules: each one's file and what it names.
struct Crate {
    files: BTreeMap<Module, String>,
    named: BTreeMap<Module, Vec<Named>>,
}

fn join(segs: &[String]) -> Module {
    segs.join("::")
}

fn split(m: &str) -> Vec<String> {
    if m.is_empty() {
        Vec::new()
    } else {
        m.split("::").map(String::from).collect()
    }
}

impl Crate {
    /// The crate from `(module, file, text)` triples.
    fn new(sources: Vec<(Module, String, String)>) -> Crate {
        let mut files = BTreeMap::new();
        let mut named = BTreeMap::new();
        let mut test_only = BTreeSet::new();
        for (m, file, text) in sources {
            let (paths, tests) = named_paths(&text);
            for t in tests {
                test_only.insert(if m.is_empty() { t } else { format!("{m}::{t}") });
            }
            files.insert(m.clone(), file);
            named.insert(m, paths);
        }
        let is_test = |m: &str| test_only.iter().any(|t| m == t || m.starts_with(&format!("{t}::")));
        files.retain(|m, _| !is_test(m));
        named.retain(|m, _| !is_test(m));
        Crate { files, named }
    }

    /// The crate under `src`.
    fn read(src: &Path) -> Crate {
        let mut sources = Vec::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let rel = path.strip_prefix(src).unwrap();
                let mut segs: Vec<String> =
                    rel.iter().map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
                if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
                    segs.pop();
                }
                let text = std::fs::read_to_string(&path).unwrap();
                sources.push((join(&segs), format!("src/{}", rel.display()), text));
            }
        }
        Crate::new(sources)
    }

    /// The module a path named in module `m` leads to (through re-exports), or `None` outside the crate.
    fn resolve(&self, m: &str, segs: &[String], depth: usize) -> Option<Module> {
        let mut base = split(m);
        let mut rest = segs;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                // A path relative to `m`: a submodule of it, else another crate (std, serde, …).
                let mut child = base.clone();
                child.push(first.to_string());
                if !self.files.contains_key(&join(&child)) {
                    return None;
                }
            }
            None => return None,
        }
        for (k, seg) in rest.iter().enumerate() {
            let mut deeper = base.clone();
            deeper.push(seg.clone());
            if self.files.contains_key(&join(&deeper)) {
                base = deeper;
                continue;
            }
            // An item of `base`: defined there, or imported (re-exported) from elsewhere.
            let here = join(&base);
            if depth < 8 {
                if let Some(named) = self.named.get(&here) {
                    if let Some(n) = named.iter().find(|n| n.binds.as_deref() == Some(seg.as_str())) {
                        let mut path = n.segs.clone();
                        path.extend(rest[k + 1..].iter().cloned());
                        return self.resolve(&here, &path, depth + 1).or(Some(here));
                    }
                }
            }
            return Some(here);
        }
        Some(join(&base))
    }

    /// Every arrow between two modules, without a module's arrows to itself or into its own submodules.
    fn arrows(&self) -> Vec<Arrow> {
        let mut out = Vec::new();
        for (m, named) in &self.named {
            if m.is_empty() {
                continue;
            }
            for n in named {
                let Some(to) = self.resolve(m, &n.segs, 0) else { continue };
                if &to == m || to.is_empty() || to.starts_with(&format!("{m}::")) {
                    continue;
                }
                let at = format!("{}:{}: {}", self.files[m], n.line, n.segs.join("::"));
                out.push(Arrow { from: m.clone(), to, at });
            }
        }
        out
    }
}

/// One cycle among `arrows`, each of its arrows with where it was found; `None` when the graph has none.
fn find_cycle(arrows: &[Arrow]) -> Option<Vec<Arrow>> {
    let mut next: BTreeMap<&str, Vec<&Arrow>> = BTreeMap::new();
    for a in arrows {
        next.entry(a.from.as_str()).or_default().push(a);
    }
    // Depth-first search with colours: white (absent), grey (on the path), black (done).
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        Grey,
        Black,
    }
    fn visit<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a Arrow>>,
        colour: &mut BTreeMap<&'a str, Colour>,
        path: &mut Vec<&'a Arrow>,
    ) -> Option<Vec<Arrow>> {
        colour.insert(m, Colour::Grey);
        for a in next.get(m).into_iter().flatten() {
            match colour.get(a.to.as_str()) {
                Some(Colour::Grey) => {
                    let start = path.iter().position(|p| p.from == a.to).unwrap_or(path.len());
                    let mut cycle: Vec<Arrow> = path[start..].iter().map(|a| (*a).clone()).collect();
                    cycle.push((*a).clone());
                    return Some(cycle);
                }
                Some(Colour::Black) => {}
                None => {
                    path.push(a);
                    if let Some(c) = visit(a.to.as_str(), next, colour, path) {
                        return Some(c);
                    }
                    path.pop();
                }
            }
        }
        colour.insert(m, Colour::Black);
        None
    }
    let mut colour = BTreeMap::new();
    let starts: Vec<&str> = next.keys().copied().collect();
    for m in starts {
        if !colour.contains_key(m) {
            if let Some(c) = visit(m, &next, &mut colour, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The arrows against the layers.
fn against_layers(arrows: &[Arrow]) -> Vec<Arrow> {
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    arrows
        .iter()
        .filter(|a| {
            let (from, to) = (top(&a.from), top(&a.to));
            from != to && !allowed(&from).is_some_and(|ok| ok.contains(&to.as_str()))
        })
        .cloned()
        .collect()
}

fn show_cycle(cycle: &[Arrow]) -> String {
    let mut s = cycle.first().map(|a| a.from.clone()).unwrap_or_default();
    for a in cycle {
        s.push_str(&format!(" → {}", a.to));
    }
    for a in cycle {
        s.push_str(&format!("\n  {} → {}  ({})", a.from, a.to, a.at));
    }
    s
}

// ---------------------------------------------------------------------------------------------------------------
// The checks.

fn the_crate() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn the_module_graph_has_no_cycle() {
    let arrows = the_crate().arrows();
    assert!(arrows.len() > 200, "the graph was read: {} arrows", arrows.len());
    if let Some(cycle) = find_cycle(&arrows) {
        panic!("a module cycle: {}", show_cycle(&cycle));
    }
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let krate = the_crate();
    for top in krate.files.keys().filter(|m| !m.is_empty() && !m.contains("::")) {
        assert!(allowed(top).is_some(), "the top-level module '{top}' has no place in the layers: add it to allowed()");
    }
    let wrong = against_layers(&krate.arrows());
    let listed: Vec<String> = wrong.iter().map(|a| format!("{} → {}  ({})", a.from, a.to, a.at)).collect();
    assert!(
        wrong.is_empty(),
        "arrows against the layers (core ← store ← runtime ← providers, tools ← front):\n{}",
        listed.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------------------------
// The checker itself, on small made-up crates.

fn arrow(from: &str, to: &str) -> Arrow {
    Arrow { from: from.into(), to: to.into(), at: format!("{from}.rs") }
}

fn made_up(sources: &[(&str, &str)]) -> Crate {
    Crate::new(sources.iter().map(|(m, text)| (m.to_string(), format!("{m}.rs"), text.to_string())).collect())
}

fn pairs(arrows: &[Arrow]) -> BTreeSet<(String, String)> {
    arrows.iter().map(|a| (a.from.clone(), a.to.clone())).collect()
}

#[test]
fn find_cycle_names_a_cycle_and_finds_none_in_a_graph_without_one() {
    let dag = [arrow("a", "b"), arrow("b", "c"), arrow("a", "c"), arrow("c", "d")];
    assert!(find_cycle(&dag).is_none());
    let mut cyclic = dag.to_vec();
    cyclic.push(arrow("d", "b"));
    let cycle = find_cycle(&cyclic).expect("b → c → d → b");
    let modules: Vec<&str> = cycle.iter().map(|a| a.from.as_str()).collect();
    assert_eq!(modules, ["b", "c", "d"]);
    assert_eq!(cycle.last().unwrap().to, "b");
    assert!(show_cycle(&cycle).starts_with("b → c → d → b\n"), "{}", show_cycle(&cycle));
    assert!(find_cycle(&[arrow("x", "x")]).is_some(), "a module naming itself is a cycle of one");
}

#[test]
fn arrows_come_from_code_and_use_statements_through_re_exports_not_from_comments_strings_or_tests() {
    let krate = made_up(&[
        ("", "pub mod run; mod leaf;"),
        ("run", "mod agent; mod deps; mod approvals; pub use agent::{Agent, Warn as Warning};"),
        (
            "run::agent",
            "use super::approvals::Approvals;\n/// [`crate::run::deps`]\npub struct Agent; pub type Warn = ();",
        ),
        ("run::approvals", "pub struct Approvals; fn f() { let _ = super::deps::new(); }"),
        (
            "run::deps",
            "// crate::leaf::x\nconst S: &str = \"crate::leaf::y\";\nconst R: &str = r#\"self::x\"#;\n\
             pub fn new(w: Option<crate::run::Warning>) -> char { 'x' }\n\
             #[cfg(test)]\nmod tests { use crate::leaf::z; }",
        ),
        ("leaf", "#[cfg(test)]\nmod fixtures;"),
        ("leaf::fixtures", "use crate::run::Agent;"),
    ]);
    let arrows = krate.arrows();
    let expected: BTreeSet<(String, String)> = [
        ("run::agent", "run::approvals"),
        ("run::approvals", "run::deps"),
        // `crate::run::Warning` is the agent's `Warn`, re-exported by `run` under another name.
        ("run::deps", "run::agent"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(pairs(&arrows), expected, "{arrows:#?}");
    let cycle = find_cycle(&arrows).expect("agent → approvals → deps → agent");
    assert_eq!(cycle.len(), 3);
    assert!(cycle.iter().any(|a| a.at == "run::deps.rs:4: crate::run::Warning"), "{cycle:#?}");
}

#[test]
fn an_arrow_to_a_higher_layer_is_reported_and_arrows_down_are_not() {
    let krate = made_up(&[
        ("", "pub mod core; pub mod store; pub mod runtime; pub mod time;"),
        ("core", "pub mod error;"),
        ("core::error", "pub struct Error; fn f() -> crate::store::Lease { todo!() }"),
        ("store", "pub struct Lease; use crate::core::error::Error; use crate::time::Clock;"),
        ("runtime", "use crate::store::Lease; use crate::core::error::Error;"),
        ("time", "pub trait Clock {}"),
    ]);
    let wrong = pairs(&against_layers(&krate.arrows()));
    assert_eq!(wrong, [("core::error".to_string(), "store".to_string())].into());
}
