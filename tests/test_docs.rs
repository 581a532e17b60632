//! Docs generated from the enum: golden files for Mermaid, DOT and Markdown,
//! the README's diagram, a structural check of the Mermaid output, Graphviz
//! rendering of the DOT output, and the freshness assertions themselves.
//!
//! After changing a machine or a renderer, regenerate the golden files with
//! `STATEGUARD_BLESS=1 cargo test --test test_docs` and review the diff.

#[path = "../examples/payouts/status.rs"]
mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use stateguard::{StateMachine, docs};
use status::PayoutStatus;

/// An order's life from cart to refund: 18 states, 21 transitions, several
/// with many sources, an in-flight payment authorization, and cycles
/// (`edit`, `retry_payment`, `reject_return`), hence the version column.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "shop.orders",
    column = "state",
    key = "order_id",
    version = "version"
)]
enum OrderStatus {
    #[state(initial)]
    #[transition(submit -> Submitted, set(submitted_at = "CURRENT_TIMESTAMP"))]
    #[transition(expire -> Abandoned)]
    Draft,
    #[transition(authorize -> Authorizing)]
    #[transition(edit -> Draft)]
    #[transition(cancel -> Cancelled)]
    Submitted,
    #[state(in_flight(
        lease = "45s",
        since = "authorizing_since",
        done = approve,
        failed = decline
    ))]
    #[transition(approve -> Authorized, set(authorized_at = "CURRENT_TIMESTAMP"))]
    #[transition(decline -> Declined)]
    #[transition(cancel -> Cancelled)]
    Authorizing,
    #[transition(pick -> Picking)]
    #[transition(cancel -> Cancelled)]
    Authorized,
    #[transition(retry_payment -> Authorizing)]
    #[transition(expire -> Abandoned)]
    Declined,
    #[transition(pack -> Packed)]
    #[transition(backorder -> Backordered)]
    #[transition(hold -> OnHold)]
    #[transition(cancel -> Cancelled)]
    Picking,
    #[transition(pick -> Picking)]
    #[transition(cancel -> Cancelled)]
    Backordered,
    #[transition(ship -> Shipped, set(shipped_at = "CURRENT_TIMESTAMP", tracking_note = "tracking_note || '|shipped'"))]
    #[transition(hold -> OnHold)]
    Packed,
    #[transition(release -> Packed)]
    #[transition(cancel -> Cancelled)]
    OnHold,
    #[transition(deliver -> Delivered)]
    #[transition(lose -> Lost)]
    Shipped,
    #[transition(request_return -> ReturnRequested)]
    #[transition(close -> Closed)]
    Delivered,
    #[transition(receive_return -> Returned)]
    #[transition(reject_return -> Delivered)]
    #[transition(close -> Closed)]
    ReturnRequested,
    #[transition(refund -> Refunded, set(refunded_at = "CURRENT_TIMESTAMP"))]
    Returned,
    #[transition(refund -> Refunded, set(refunded_at = "CURRENT_TIMESTAMP"))]
    Lost,
    Refunded,
    Closed,
    Cancelled,
    Abandoned,
}

/// Names and strings chosen to break naive renderers: variants that are
/// Mermaid keywords, a non-ASCII variant, database strings with quotes,
/// pipes, backticks, `;`, `:`, `#`, `&` and HTML, one that Mermaid's lexer
/// would read as a `direction` statement, and `set` expressions with `||`, a
/// backtick (inside a string literal: a bare one is refused) and a line break.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "awkward", column = "status", key = "id")]
enum Awkward {
    #[state(initial)]
    #[transition(begin -> State, set(log = "log || '|begin|'"))]
    #[transition(classify -> Class)]
    #[transition(brew -> Café, set(note = "'`raw`'\n|| 'x'"))]
    Start,
    #[state(
        rename = "on hold: \"manual\" | `ops`; #1 <b>&amp;</b>",
        in_flight(lease = "90m", since = "state_since", done = finish, failed = shelve)
    )]
    #[transition(finish -> End)]
    #[transition(shelve -> Class)]
    State,
    #[state(rename = "direction TB")]
    #[transition(finish -> End)]
    Class,
    #[state(rename = "``tick``")]
    End,
    Café,
}

fn root(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

// ---------------------------------------------------------------------------
// Golden files

fn assert_goldens<T: StateMachine>(stem: &str) {
    docs::assert_fresh::<T>(root(&format!("docs/{stem}.md")));
    docs::assert_fresh_file(root(&format!("docs/{stem}.mmd")), &docs::mermaid::<T>());
    docs::assert_fresh_file(root(&format!("docs/{stem}.dot")), &docs::dot::<T>());
}

#[test]
fn payout_docs_are_fresh() {
    assert_goldens::<PayoutStatus>("payouts");
}

#[test]
fn order_docs_are_fresh() {
    assert_goldens::<OrderStatus>("large");
}

#[test]
fn awkward_docs_are_fresh() {
    assert_goldens::<Awkward>("awkward");
}

#[test]
fn readme_diagram_is_fresh() {
    docs::assert_fresh_diagram::<PayoutStatus>(root("README.md"));
}

#[test]
fn rendering_is_deterministic() {
    fn twice<T: StateMachine>() {
        assert_eq!(docs::mermaid::<T>(), docs::mermaid::<T>());
        assert_eq!(docs::dot::<T>(), docs::dot::<T>());
        assert_eq!(docs::markdown::<T>(), docs::markdown::<T>());
        // And the same from another thread.
        let other = std::thread::spawn(docs::markdown::<T>).join().unwrap();
        assert_eq!(other, docs::markdown::<T>());
    }
    twice::<PayoutStatus>();
    twice::<OrderStatus>();
    twice::<Awkward>();
}

#[test]
fn the_large_machine_is_large() {
    let machine = OrderStatus::MACHINE;
    assert!(machine.states().len() >= 12);
    assert!(machine.transitions().len() >= 20);
    let multi = machine
        .transitions()
        .iter()
        .filter(|t| t.sources().len() > 1)
        .count();
    assert!(multi >= 3, "{multi} multi-source transitions");
    assert_eq!(machine.version(), Some("version"));
}

// ---------------------------------------------------------------------------
// Mermaid: a structural check of stateDiagram-v2

/// What the checker read from a diagram, with entities decoded.
#[derive(Default, Debug)]
struct Diagram {
    /// id → descriptions, in order of first mention.
    states: BTreeMap<String, Vec<String>>,
    initial: Vec<String>,
    terminal: Vec<String>,
    /// (from, to, label)
    edges: Vec<(String, String, String)>,
    notes: Vec<(String, String)>,
    class_defs: BTreeSet<String>,
    classes: Vec<(String, String)>,
}

/// Words Mermaid's state-diagram lexer treats as statements, in any case.
const KEYWORDS: &[&str] = &[
    "accdescr",
    "acctitle",
    "as",
    "class",
    "classdef",
    "click",
    "default",
    "direction",
    "end",
    "hide",
    "href",
    "left",
    "note",
    "of",
    "right",
    "root_end",
    "root_start",
    "scale",
    "state",
    "statediagram",
    "style",
    "width",
];

fn check_id(id: &str) -> Result<String, String> {
    let mut chars = id.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !starts_well || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{id}` is not a plain state id"));
    }
    if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(id)) {
        return Err(format!("`{id}` is a Mermaid keyword"));
    }
    Ok(id.to_owned())
}

/// Label text: nothing that ends the statement, every `#` a numeric entity
/// (Mermaid swaps those out before it lexes). Returns the decoded text.
fn check_text(text: &str) -> Result<String, String> {
    fn check_raw(raw: &str, text: &str) -> Result<(), String> {
        match raw
            .chars()
            .find(|c| matches!(c, ':' | ';' | '"' | '<' | '>' | '`') || c.is_control())
        {
            Some(c) => Err(format!("text {text:?} contains a raw {c:?}")),
            None => Ok(()),
        }
    }
    if text.is_empty() {
        return Err("empty text".to_owned());
    }
    if text.to_ascii_lowercase().contains("direction ") {
        return Err(format!("text {text:?} reads as a direction statement"));
    }
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('#') {
        check_raw(&rest[..at], text)?;
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let code = after
            .find(';')
            .and_then(|end| Some((after[..end].parse::<u32>().ok()?, end)));
        let Some((code, end)) = code else {
            return Err(format!(
                "text {text:?} has a `#` that is not a numeric entity"
            ));
        };
        out.push(char::from_u32(code).ok_or("bad entity")?);
        rest = &after[end + 1..];
    }
    check_raw(rest, text)?;
    out.push_str(rest);
    Ok(out)
}

fn parse_mermaid(text: &str) -> Result<Diagram, String> {
    let mut lines = text.lines();
    if lines.next() != Some("stateDiagram-v2") {
        return Err("the first line is not `stateDiagram-v2`".to_owned());
    }
    if !text.ends_with('\n') {
        return Err("no final newline".to_owned());
    }
    let mut d = Diagram::default();
    for (n, line) in lines.enumerate() {
        let n = n + 2;
        let statement = line
            .strip_prefix("    ")
            .filter(|s| !s.starts_with(' ') && !s.is_empty() && s.trim_end() == *s)
            .ok_or_else(|| format!("line {n} is not one indented statement: {line:?}"))?;
        parse_statement(&mut d, statement).map_err(|e| format!("line {n} ({line:?}): {e}"))?;
    }
    Ok(d)
}

fn parse_statement(d: &mut Diagram, s: &str) -> Result<(), String> {
    // note right of Id : text
    if let Some(rest) = s.strip_prefix("note right of ") {
        let (id, text) = rest.split_once(" : ").ok_or("a note without ` : `")?;
        d.notes.push((check_id(id)?, check_text(text)?));
    // classDef name styles
    } else if let Some(rest) = s.strip_prefix("classDef ") {
        let (name, styles) = rest.split_once(' ').ok_or("a classDef without styles")?;
        if styles.contains(';') || styles.contains(' ') {
            return Err("classDef styles with `;` or spaces".to_owned());
        }
        d.class_defs.insert(check_id(name)?);
    // class Id,Id name
    } else if let Some(rest) = s.strip_prefix("class ") {
        let (ids, name) = rest.split_once(' ').ok_or("a class without a name")?;
        for id in ids.split(',') {
            d.classes.push((check_id(id)?, check_id(name)?));
        }
    // [*] --> Id
    } else if let Some(id) = s.strip_prefix("[*] --> ") {
        d.initial.push(check_id(id)?);
    } else if let Some((from, rest)) = s.split_once(" --> ") {
        let from = check_id(from)?;
        // Id --> [*]
        if rest == "[*]" {
            d.terminal.push(from);
        // Id --> Id : label
        } else {
            let (to, label) = rest.split_once(" : ").ok_or("an edge without a label")?;
            d.edges.push((from, check_id(to)?, check_text(label)?));
        }
    // Id : description
    } else if let Some((id, text)) = s.split_once(" : ") {
        let text = check_text(text)?;
        d.states.entry(check_id(id)?).or_default().push(text);
    } else {
        return Err("not a statement form this renderer writes".to_owned());
    }
    Ok(())
}

/// Parses the machine's diagram and checks it against the machine itself.
fn check_mermaid<T: StateMachine>() {
    let machine = T::MACHINE;
    let text = docs::mermaid::<T>();
    let d = parse_mermaid(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let declared = |id: &String| {
        assert!(
            d.states.contains_key(id),
            "`{id}` is used but never declared\n{text}"
        )
    };

    // One declared id per state, found through its database string.
    assert_eq!(d.states.len(), machine.states().len(), "{text}");
    let id_of = |state: T| -> String {
        let db = state.as_str();
        let found: Vec<&String> = d
            .states
            .iter()
            .filter(|(_, descriptions)| descriptions.last().map(String::as_str) == Some(db))
            .map(|(id, _)| id)
            .collect();
        assert_eq!(found.len(), 1, "state {db:?}: ids {found:?}\n{text}");
        found[0].clone()
    };
    for state in machine.states() {
        let id = id_of(state.value());
        let descriptions = &d.states[&id];
        if id != state.variant() {
            assert_eq!(descriptions[0], state.variant(), "{text}");
        }
    }

    assert_eq!(d.initial, [id_of(machine.initial())], "{text}");
    let terminal: Vec<String> = machine
        .states()
        .iter()
        .filter(|s| machine.is_terminal(s.value()))
        .map(|s| id_of(s.value()))
        .collect();
    assert_eq!(d.terminal, terminal, "{text}");

    let expected: Vec<(String, String, String)> = machine
        .transitions()
        .iter()
        .flat_map(|t| {
            t.sources()
                .iter()
                .map(move |&s| (id_of(s), id_of(t.target()), edge_label(t)))
        })
        .collect();
    assert_eq!(d.edges, expected, "{text}");
    for (from, to, _) in &d.edges {
        declared(from);
        declared(to);
    }

    let in_flight: Vec<String> = machine
        .states()
        .iter()
        .filter(|s| s.in_flight().is_some())
        .map(|s| id_of(s.value()))
        .collect();
    let noted: Vec<String> = d.notes.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(noted, in_flight, "{text}");
    for (state, (_, note)) in machine
        .states()
        .iter()
        .filter_map(|s| s.in_flight())
        .zip(&d.notes)
    {
        assert!(note.contains("lease"), "{note}");
        assert!(note.contains(state.since_column()), "{note}");
    }
    let classed: Vec<String> = d.classes.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(classed, in_flight, "{text}");
    for (id, class) in &d.classes {
        declared(id);
        assert!(d.class_defs.contains(class), "class {class} is not defined");
    }

    // Every state is reachable from [*].
    let mut reached: BTreeSet<&String> = d.initial.iter().collect();
    let mut stack: Vec<&String> = d.initial.iter().collect();
    while let Some(id) = stack.pop() {
        for (from, to, _) in &d.edges {
            if from == id && reached.insert(to) {
                stack.push(to);
            }
        }
    }
    let unreached: Vec<&String> = d.states.keys().filter(|id| !reached.contains(id)).collect();
    assert!(unreached.is_empty(), "unreachable: {unreached:?}\n{text}");
}

#[test]
fn mermaid_is_a_valid_state_diagram() {
    check_mermaid::<PayoutStatus>();
    check_mermaid::<OrderStatus>();
    check_mermaid::<Awkward>();
}

#[test]
fn mermaid_checker_rejects_broken_diagrams() {
    let ok = "stateDiagram-v2\n    A : a\n    B : b\n    [*] --> A\n    A --> B : go\n";
    assert!(parse_mermaid(ok).is_ok());
    for bad in [
        "graph TD\n    A : a\n",
        "stateDiagram-v2\n    State : a\n",
        "stateDiagram-v2\n    A : a;b\n",
        "stateDiagram-v2\n    A : on \"hold\"\n",
        "stateDiagram-v2\n    A : direction TB\n",
        "stateDiagram-v2\n    A : #1\n",
        "stateDiagram-v2\n    A --> B\n",
        "stateDiagram-v2\n  A : a\n",
        "stateDiagram-v2\n    A : a",
    ] {
        assert!(parse_mermaid(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn awkward_names_are_escaped() {
    let mermaid = docs::mermaid::<Awkward>();
    assert!(mermaid.contains("\n    State_ : State\n"), "{mermaid}");
    assert!(mermaid.contains("\n    End_ : End\n"), "{mermaid}");
    assert!(mermaid.contains("\n    Caf_ue9_ : Café\n"), "{mermaid}");
    assert!(mermaid.contains("direction#32;TB"), "{mermaid}");

    let dot = docs::dot::<Awkward>();
    assert!(dot.contains(r#"\"manual\""#), "{dot}");
    assert!(dot.contains("&amp;amp;"), "{dot}");

    let markdown = docs::markdown::<Awkward>();
    assert!(
        markdown.contains(r#"``on hold: "manual" \| `ops`; #1 <b>&amp;</b>``"#),
        "{markdown}"
    );
    assert!(markdown.contains("``` ``tick`` ```"), "{markdown}");
    assert!(
        markdown.contains(r"`log = log \|\| '\|begin\|'`"),
        "{markdown}"
    );
    assert!(
        markdown.contains(r"``note = '`raw`' \|\| 'x'``"),
        "{markdown}"
    );
}

// ---------------------------------------------------------------------------
// Markdown

/// Splits a GFM table row at its unescaped pipes.
fn cells(row: &str) -> Vec<String> {
    let inner = row
        .strip_prefix("| ")
        .and_then(|r| r.strip_suffix(" |"))
        .unwrap_or_else(|| panic!("not a table row: {row:?}"));
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        if c == '|' && !escaped {
            cells.push(String::new());
        } else {
            cells.last_mut().unwrap().push(c);
        }
        escaped = c == '\\' && !escaped;
    }
    cells.iter().map(|c| c.trim().to_owned()).collect()
}

fn check_markdown<T: StateMachine>() {
    let machine = T::MACHINE;
    let text = docs::markdown::<T>();
    assert!(
        text.contains(&format!("\n# {}\n", machine.name())),
        "{text}"
    );
    assert!(text.contains(&docs::mermaid_block::<T>()), "{text}");
    let tables: Vec<Vec<&str>> = text
        .split("\n\n")
        .filter(|block| block.starts_with("| "))
        .map(|block| block.lines().collect())
        .collect();
    assert_eq!(tables.len(), 2, "{text}");
    for table in &tables {
        let width = cells(table[0]).len();
        for row in table {
            assert_eq!(cells(row).len(), width, "{row}");
        }
    }
    assert_eq!(tables[0].len(), 2 + machine.states().len());
    assert_eq!(tables[1].len(), 2 + machine.transitions().len());
    for (row, state) in tables[0][2..].iter().zip(machine.states()) {
        let cells = cells(row);
        assert!(cells[0].contains(state.variant()), "{row}");
        assert_eq!(cells[2].contains("initial"), state.is_initial(), "{row}");
        assert_eq!(
            cells[2].contains("terminal"),
            machine.is_terminal(state.value()),
            "{row}"
        );
        assert_eq!(
            cells[2].contains("in flight"),
            state.in_flight().is_some(),
            "{row}"
        );
        if let Some(def) = state.in_flight() {
            assert!(cells[4].contains(def.since_column()), "{row}");
            assert!(!cells[3].is_empty(), "{row}");
        }
    }
    // A guard column sits before "also sets" when any transition has a guard.
    let guarded = machine.transitions().iter().any(|t| t.guard().is_some());
    let sets_at = 3 + usize::from(guarded);
    assert_eq!(cells(tables[1][0]).len(), sets_at + 1, "{}", tables[1][0]);
    for (row, transition) in tables[1][2..].iter().zip(machine.transitions()) {
        let cells = cells(row);
        assert_eq!(cells[0], format!("`{}`", transition.name()), "{row}");
        if guarded {
            let shown = transition
                .guard()
                .map(|g| format!("`{g}`"))
                .unwrap_or_default();
            assert_eq!(cells[3], shown, "{row}");
        }
        assert_eq!(
            cells[1].matches(", ").count() + 1,
            transition.sources().len(),
            "{row}"
        );
        let target = machine.state(transition.target()).unwrap();
        if let Some(def) = target.in_flight() {
            assert!(cells[sets_at].contains(def.since_column()), "{row}");
        }
        if let Some(version) = machine.version() {
            assert!(
                cells[sets_at].contains(&format!("{version} = {version} + 1")),
                "{row}"
            );
        }
        for set in transition.set_columns() {
            assert!(cells[sets_at].contains(set.column()), "{row}");
        }
    }
}

#[test]
fn markdown_tables_are_well_formed() {
    check_markdown::<PayoutStatus>();
    check_markdown::<OrderStatus>();
    check_markdown::<Awkward>();
}

// ---------------------------------------------------------------------------
// Graphviz

fn require_graphviz() -> bool {
    std::env::var("STATEGUARD_REQUIRE_GRAPHVIZ").is_ok_and(|v| v == "1")
}

/// Whether `dot` can be run; if not, says why the check is skipped, or fails
/// under `STATEGUARD_REQUIRE_GRAPHVIZ=1` (set by CI).
fn graphviz_available() -> bool {
    match Command::new("dot").arg("-V").output() {
        Ok(output) if output.status.success() => true,
        outcome => {
            let why = match outcome {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    "`dot` is not installed".to_owned()
                }
                Err(e) => format!("`dot -V` could not run: {e}"),
                Ok(output) => format!("`dot -V` failed: {}", output.status),
            };
            assert!(
                !require_graphviz(),
                "{why}, but STATEGUARD_REQUIRE_GRAPHVIZ=1 (install Graphviz: apt-get install graphviz)"
            );
            let _ = writeln!(
                std::io::stderr(),
                "skipped `graphviz_renders_the_dot_output`: {why}"
            );
            false
        }
    }
}

/// `dot -Tsvg` of `source`: it must succeed without warnings.
fn render_svg(source: &str) -> String {
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run `dot -Tsvg`");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(source.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "dot failed ({}): {stderr}\n{source}",
        output.status
    );
    assert!(stderr.trim().is_empty(), "dot warned: {stderr}\n{source}");
    String::from_utf8(output.stdout).unwrap()
}

/// Text as Graphviz writes it into SVG.
fn svg_text(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '-' => out.push_str("&#45;"),
            c => out.push(c),
        }
    }
    out
}

fn check_dot<T: StateMachine>() {
    let source = docs::dot::<T>();
    assert!(
        source.starts_with(&format!("digraph \"{}\" {{\n", T::MACHINE.name())),
        "{source}"
    );
    let svg = render_svg(&source);
    for state in T::MACHINE.states() {
        let title = format!("<title>{}</title>", svg_text(state.variant()));
        assert!(svg.contains(&title), "no {title} in the SVG of\n{source}");
        let db = format!(">{}</text>", svg_text(state.db_str()));
        assert!(svg.contains(&db), "no {db} in the SVG of\n{source}");
    }
    for transition in T::MACHINE.transitions() {
        let label = format!(">{}</text>", svg_text(&edge_label(transition)));
        assert!(svg.contains(&label), "no {label} in the SVG");
    }
}

#[test]
fn graphviz_renders_the_dot_output() {
    if !graphviz_available() {
        return;
    }
    check_dot::<PayoutStatus>();
    check_dot::<OrderStatus>();
    check_dot::<Awkward>();
}

// ---------------------------------------------------------------------------
// The freshness assertions

fn blessing() -> bool {
    std::env::var("STATEGUARD_BLESS").is_ok_and(|v| v == "1")
}

/// The panic message of `f`, or `None` if it did not panic.
fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> Option<String> {
    let payload = std::panic::catch_unwind(f).err()?;
    Some(match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .unwrap_or_default(),
    })
}

// Under STATEGUARD_BLESS=1 these check that the file was written instead.

#[test]
fn a_stale_file_fails_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payouts.md");
    let stale = docs::markdown::<PayoutStatus>().replace("| `confirm` |", "| `settle` |");
    std::fs::write(&path, &stale).unwrap();
    let message = panic_message(|| docs::assert_fresh::<PayoutStatus>(&path));
    if blessing() {
        assert_eq!(message, None);
        let written = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written, docs::markdown::<PayoutStatus>());
        return;
    }
    let message = message.expect("a stale file must fail");
    assert!(message.contains("is out of date"), "{message}");
    assert!(message.contains("\n-| `settle` |"), "{message}");
    assert!(message.contains("\n+| `confirm` |"), "{message}");
    assert!(message.contains("STATEGUARD_BLESS=1"), "{message}");
    // Only the changed line and its context are shown.
    assert!(!message.contains("# PayoutStatus"), "{message}");
}

#[test]
fn a_missing_file_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("missing.dot");
    let message = panic_message(|| docs::assert_fresh_file(&path, &docs::dot::<PayoutStatus>()));
    if blessing() {
        assert_eq!(message, None);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            docs::dot::<PayoutStatus>()
        );
        return;
    }
    let message = message.expect("a missing file must fail");
    assert!(message.contains("does not exist"), "{message}");
    assert!(message.contains("STATEGUARD_BLESS=1"), "{message}");
}

#[test]
fn crlf_checkouts_are_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payouts.mmd");
    let text = docs::mermaid::<PayoutStatus>().replace('\n', "\r\n");
    std::fs::write(&path, &text).unwrap();
    docs::assert_fresh_file(&path, &docs::mermaid::<PayoutStatus>());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn sections_are_checked_between_their_markers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("README.md");
    let fresh = format!(
        "# Title\n\n{}\n{}{}\nAfter.\n",
        docs::DIAGRAM_START,
        docs::mermaid_block::<PayoutStatus>(),
        docs::DIAGRAM_END
    );
    std::fs::write(&path, &fresh).unwrap();
    docs::assert_fresh_diagram::<PayoutStatus>(&path);

    let stale = fresh.replace("Sending --> Sent : confirm\n", "");
    std::fs::write(&path, &stale).unwrap();
    let message = panic_message(|| docs::assert_fresh_diagram::<PayoutStatus>(&path));
    if blessing() {
        assert_eq!(message, None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), fresh);
    } else {
        let message = message.expect("a stale section must fail");
        assert!(
            message.contains("+    Sending --> Sent : confirm"),
            "{message}"
        );
        assert!(message.contains("STATEGUARD_BLESS=1"), "{message}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), stale);
    }

    // Without its markers a section cannot be checked, nor blessed.
    std::fs::write(&path, "# Title\n").unwrap();
    let message = panic_message(|| docs::assert_fresh_diagram::<PayoutStatus>(&path))
        .expect("missing markers must fail");
    assert!(message.contains(docs::DIAGRAM_START), "{message}");

    // Any section, any content.
    std::fs::write(&path, "a\n<!-- x -->\nold\n<!-- y -->\nb\n").unwrap();
    let message =
        panic_message(|| docs::assert_fresh_section(&path, "<!-- x -->", "<!-- y -->", "new"));
    if blessing() {
        assert_eq!(message, None);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "a\n<!-- x -->\nnew\n<!-- y -->\nb\n"
        );
    } else {
        let message = message.expect("a stale section must fail");
        assert!(message.contains("\n-old\n+new\n"), "{message}");
    }
}

/// An edge's label as the renderers write it: the name, and the guard in
/// brackets.
fn edge_label<S: StateMachine>(transition: &stateguard::meta::TransitionDef<S>) -> String {
    match transition.guard() {
        Some(guard) => format!("{} [{guard}]", transition.name()),
        None => transition.name().to_owned(),
    }
}
