//! Both crates' module graphs have one direction: no module reaches, by a
//! `crate::`, `super::` or `self::` path, a module that reaches it back.
//! A cycle between two files usually means a type lives in the wrong one.
//!
//! Every path in code counts, those in macro bodies and invocations too,
//! and so do the paths of doc links (`[x](crate::a::X)`, `[crate::a::X]`):
//! a doc that links into a module depends on it as much as code does.
//! Plain comments and `#[cfg(test)]` modules do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

#[test]
fn guard_runtime_has_no_module_cycle() {
    assert_acyclic("../guard-runtime/src");
}

#[test]
fn guard_macros_has_no_module_cycle() {
    assert_acyclic("src");
}

/// The runtime's folders, bottom to top, as ARCHITECTURE.md draws them:
/// each uses only those before it in its own list. `crate` (`lib.rs`) and
/// `__private` sit on top of everything.
const LAYERS: &[&[&str]] = &[
    &[
        "dialect",
        "machine",
        "error",
        "deadline",
        "outcome",
        "executor",
        "transition",
        "batch",
        "history",
        "effects",
    ],
    &["dialect", "machine", "ddl", "docs"],
];

/// Top-level folders that sit on others without a place in one order:
/// each may use the first list of [`LAYERS`] up to and including a
/// folder, and a few more. Every folder may use `telemetry`, which
/// records what the others do.
const ON: &[(&str, &str, &[&str])] = &[
    // `stores` for a doc link to the `stores!` macro.
    ("pooler", "executor", &["stores"]),
    ("stores", "transition", &["ddl"]),
    ("outbox", "transition", &["stores", "ddl"]),
    ("verify", "transition", &["ddl"]),
    ("worker", "effects", &["stores", "outbox"]),
    ("console", "effects", &["docs", "stores", "outbox"]),
];

#[test]
fn guard_runtime_keeps_its_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guard-runtime/src");
    let mut modules = BTreeMap::new();
    read_modules(&root, &root, &mut modules);
    let wrong = upward(&graph(&modules));
    assert!(wrong.is_empty(), "uses against the layer order: {wrong:#?}");
    // A new folder takes its place in the order before it is used.
    let placed = |top: &str| {
        ["crate", "__private", "telemetry"].contains(&top)
            || LAYERS.iter().any(|layer| layer.contains(&top))
            || ON.iter().any(|(name, ..)| *name == top)
    };
    let unplaced: BTreeSet<_> = modules
        .keys()
        .map(|module| module.split("::").next().unwrap_or(module))
        .filter(|top| !placed(top))
        .collect();
    assert!(
        unplaced.is_empty(),
        "folders with no place in the layers: {unplaced:?}"
    );
}

/// No two types or traits of the runtime share a name, wherever they
/// live and whatever their visibility: a reader who meets `Found` or
/// `Call` knows which one it is. Items in `#[cfg(test)]` modules, and
/// inside functions, do not count.
#[test]
fn guard_runtime_names_each_type_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guard-runtime/src");
    let mut modules = BTreeMap::new();
    read_modules(&root, &root, &mut modules);
    let mut twice = names_twice(&modules);
    // The sealed-trait idiom: a private `Sealed` per sealed family.
    twice.remove("Sealed");
    assert!(twice.is_empty(), "type names given twice: {twice:#?}");
}

/// A name given twice is found: the check can fail.
#[test]
fn a_name_given_twice_is_found() {
    let modules = BTreeMap::from([
        (
            "a".to_owned(),
            "pub struct Call; mod inner { pub(crate) type Moved = u8; }".to_owned(),
        ),
        (
            "b".to_owned(),
            "pub(crate) enum Call {} trait Moved {}".to_owned(),
        ),
        (
            "c".to_owned(),
            "#[cfg(test)] mod tests { struct Call; } fn f() { struct Call; }".to_owned(),
        ),
    ]);
    let twice = names_twice(&modules);
    assert_eq!(
        twice,
        BTreeMap::from([
            ("Call".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
            (
                "Moved".to_owned(),
                vec!["a::inner".to_owned(), "b".to_owned()]
            ),
        ])
    );
}

/// Each type or trait name that more than one item of `modules` gives,
/// with the modules that give it.
fn names_twice(modules: &BTreeMap<String, String>) -> BTreeMap<String, Vec<String>> {
    let mut names = Names::default();
    for (module, text) in modules {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
        names.module = vec![module.clone()];
        names.visit_file(&file);
    }
    names.found.retain(|_, modules| modules.len() > 1);
    names.found
}

/// The names of the structs, enums, unions, type aliases and traits
/// outside `#[cfg(test)]` modules and function bodies, by module.
#[derive(Default)]
struct Names {
    module: Vec<String>,
    found: BTreeMap<String, Vec<String>>,
}

impl Names {
    fn add(&mut self, ident: &syn::Ident) {
        let module = self.module.join("::");
        self.found
            .entry(ident.to_string())
            .or_default()
            .push(module);
    }
}

impl<'ast> Visit<'ast> for Names {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let test_only = item.attrs.iter().any(|attr| {
            attr.path().is_ident("cfg")
                && attr
                    .parse_args::<syn::Ident>()
                    .is_ok_and(|ident| ident == "test")
        });
        if !test_only {
            self.module.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.module.pop();
        }
    }

    fn visit_block(&mut self, _: &'ast syn::Block) {}

    fn visit_item_struct(&mut self, item: &'ast syn::ItemStruct) {
        self.add(&item.ident);
    }

    fn visit_item_enum(&mut self, item: &'ast syn::ItemEnum) {
        self.add(&item.ident);
    }

    fn visit_item_union(&mut self, item: &'ast syn::ItemUnion) {
        self.add(&item.ident);
    }

    fn visit_item_type(&mut self, item: &'ast syn::ItemType) {
        self.add(&item.ident);
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.add(&item.ident);
    }
}

/// A use against the order is found: the check can fail.
#[test]
fn an_upward_use_is_found() {
    let modules = BTreeMap::from([
        ("machine".to_owned(), "use crate::deadline::X;".to_owned()),
        (
            "deadline".to_owned(),
            "use crate::machine::Y; pub struct X;".to_owned(),
        ),
        ("stores".to_owned(), "use crate::effects::Z;".to_owned()),
        ("effects".to_owned(), "pub struct Z;".to_owned()),
    ]);
    assert_eq!(
        upward(&graph(&modules)),
        [
            "machine -> deadline".to_owned(),
            "stores -> effects".to_owned()
        ]
    );
}

/// Each use from one top-level folder of the runtime to another that the
/// layers do not allow, as `from -> to` (submodules named by their folder).
fn upward(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let top = |module: &str| module.split("::").next().unwrap_or(module).to_owned();
    let allowed = |from: &str, to: &str| -> bool {
        if from == to || from == "crate" || from == "__private" || to == "telemetry" {
            return true;
        }
        if let Some((_, up_to, more)) = ON.iter().find(|(name, ..)| *name == from) {
            let order = LAYERS[0];
            let below = order
                .iter()
                .position(|n| n == up_to)
                .map_or(&[][..], |at| &order[..=at]);
            return below.contains(&to) || more.contains(&to);
        }
        let placed: Vec<_> = LAYERS.iter().filter(|l| l.contains(&from)).collect();
        if placed.is_empty() {
            return true;
        }
        placed.iter().any(|layer| {
            let at = |name: &str| layer.iter().position(|n| *n == name);
            matches!((at(from), at(to)), (Some(f), Some(t)) if t < f)
        })
    };
    let mut wrong = BTreeSet::new();
    for (from, tos) in graph {
        for to in tos {
            let (from, to) = (top(from), top(to));
            if !allowed(&from, &to) {
                wrong.insert(format!("{from} -> {to}"));
            }
        }
    }
    wrong.into_iter().collect()
}

/// A cycle made on purpose is found: the check can fail.
#[test]
fn a_cycle_is_found() {
    let modules = BTreeMap::from([
        ("a".to_owned(), "use crate::b::X; pub struct Y;".to_owned()),
        ("b".to_owned(), "pub struct X(crate::a::Y);".to_owned()),
        ("c".to_owned(), "use super::a;".to_owned()),
    ]);
    let cycles = cycles(&graph(&modules));
    assert_eq!(cycles, [vec!["a".to_owned(), "b".to_owned()]]);
}

/// A doc link back is a cycle too.
#[test]
fn a_cycle_through_a_doc_link_is_found() {
    let modules = BTreeMap::from([
        ("a".to_owned(), "use crate::b::X; pub struct Y;".to_owned()),
        (
            "b".to_owned(),
            "/// Made by [`Y`](crate::a::Y).\npub struct X;".to_owned(),
        ),
    ]);
    let cycles = cycles(&graph(&modules));
    assert_eq!(cycles, [vec!["a".to_owned(), "b".to_owned()]]);
}

fn assert_acyclic(src: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let mut modules = BTreeMap::new();
    read_modules(&root, &root, &mut modules);
    assert!(
        modules.len() > 3,
        "no modules found under {}",
        root.display()
    );
    let cycles = cycles(&graph(&modules));
    assert!(
        cycles.is_empty(),
        "module cycles in {}: {cycles:?}",
        root.display()
    );
}

/// Each `.rs` file below `dir`, by module path (`tx`, `error::kind`;
/// `crate` for `lib.rs`), with its text.
fn read_modules(root: &Path, dir: &Path, modules: &mut BTreeMap<String, String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_modules(root, &path, modules);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let name = match parts.is_empty() {
                true => "crate".to_owned(),
                false => parts.join("::"),
            };
            modules.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Module → the other modules its paths name.
fn graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let names: BTreeSet<&str> = modules.keys().map(String::as_str).collect();
    modules
        .iter()
        .map(|(module, text)| {
            let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
            let mut paths = Paths::default();
            paths.visit_file(&file);
            let edges = paths
                .found
                .iter()
                .filter_map(|path| resolve(&names, module, path))
                .filter(|target| {
                    target != module
                        && target != "crate"
                        && !module.starts_with(&format!("{target}::"))
                        && !target.starts_with(&format!("{module}::"))
                })
                .collect();
            (module.clone(), edges)
        })
        .collect()
}

/// The module that `path` (`crate::a::b::Item`, `super::x`) names from
/// `module`: the longest prefix that is a module.
fn resolve(names: &BTreeSet<&str>, module: &str, path: &[String]) -> Option<String> {
    let mut base: Vec<&str> = match module {
        "crate" => Vec::new(),
        _ => module.split("::").collect(),
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super" | "self") => {
            while let Some(first) = rest.first().map(String::as_str) {
                match first {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let full: Vec<&str> = base
        .into_iter()
        .chain(rest.iter().map(String::as_str))
        .collect();
    (1..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|candidate| names.contains(candidate.as_str()))
}

/// Every path that starts at `crate`, `super` or `self`, outside
/// `#[cfg(test)]` modules.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let test_only = item.attrs.iter().any(|attr| {
            attr.path().is_ident("cfg")
                && attr
                    .parse_args::<syn::Ident>()
                    .is_ok_and(|ident| ident == "test")
        });
        if !test_only {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.found.push(
            path.segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect(),
        );
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        use_tree(&mut Vec::new(), &item.tree, &mut self.found);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if let syn::Meta::NameValue(doc) = &attr.meta
            && doc.path.is_ident("doc")
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) = &doc.value
        {
            doc_links(&text.value(), &mut self.found);
        }
        syn::visit::visit_attribute(self, attr);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        tokens(mac.tokens.clone(), &mut self.found);
        syn::visit::visit_macro(self, mac);
    }
}

/// The paths that doc links in `text` name: a `crate::`, `super::` or
/// `self::` path right after a link's `(` or `[` (or a backtick inside
/// one).
fn doc_links(text: &str, found: &mut Vec<Vec<String>>) {
    for start in [
        "(crate::",
        "[crate::",
        "[`crate::",
        "(super::",
        "[super::",
        "[`super::",
        "(self::",
        "[self::",
        "[`self::",
    ] {
        // The delimiters before the path's first segment.
        let delimiters = start.len() - start.trim_start_matches(['(', '[', '`']).len();
        let mut rest = text;
        while let Some(at) = rest.find(start) {
            let path: String = rest[at + delimiters..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segments: Vec<String> = path
                .split("::")
                .filter(|segment| !segment.is_empty())
                .map(str::to_owned)
                .collect();
            found.push(segments);
            rest = &rest[at + start.len()..];
        }
    }
}

/// The paths a `use` tree names, each from its root.
fn use_tree(prefix: &mut Vec<String>, tree: &syn::UseTree, found: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_tree(prefix, &path.tree, found);
            prefix.pop();
        }
        syn::UseTree::Name(name) => found.push(extended(prefix, &name.ident)),
        syn::UseTree::Rename(rename) => found.push(extended(prefix, &rename.ident)),
        syn::UseTree::Glob(_) => found.push(prefix.clone()),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_tree(prefix, tree, found);
            }
        }
    }
}

fn extended(prefix: &[String], ident: &syn::Ident) -> Vec<String> {
    let mut path = prefix.to_vec();
    path.push(ident.to_string());
    path
}

/// The `a::b::c` runs of identifiers in a macro's tokens, nested groups
/// included.
fn tokens(stream: TokenStream, found: &mut Vec<Vec<String>>) {
    let trees: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(group) => tokens(group.stream(), found),
            TokenTree::Ident(ident) => {
                let mut path = vec![ident.to_string()];
                let mut j = i + 1;
                while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(next)) =
                    (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    match next {
                        TokenTree::Ident(next) => path.push(next.to_string()),
                        // `crate::{a, b}` in a macro: each item from the prefix.
                        TokenTree::Group(group) => {
                            for item in group.stream() {
                                if let TokenTree::Ident(item) = item {
                                    found.push(extended(&path, &item));
                                }
                            }
                            break;
                        }
                        _ => break,
                    }
                    j += 3;
                }
                if path.len() > 1 {
                    found.push(path);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// The strongly connected components of more than one module, each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then components on its reverse.
    fn finish(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(node.to_owned()) {
            return;
        }
        for next in graph.get(node).into_iter().flatten() {
            finish(next, graph, seen, order);
        }
        order.push(node.to_owned());
    }
    let mut reverse: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            reverse.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let (mut seen, mut order) = (BTreeSet::new(), Vec::new());
    for node in graph.keys() {
        finish(node, graph, &mut seen, &mut order);
    }
    let mut assigned = BTreeSet::new();
    let mut components = Vec::new();
    for node in order.iter().rev() {
        let mut component = Vec::new();
        finish(node, &reverse, &mut assigned, &mut component);
        if component.len() > 1 {
            component.sort();
            components.push(component);
        }
    }
    components
}
