//! Docs generated from the enum: golden files for Mermaid, DOT and Markdown,
//! the README's diagram, a structural check of the Mermaid output, Graphviz
//! rendering of the DOT output, and the freshness assertions themselves.
//!
//! After changing a machine or a renderer, regenerate the golden files with
//! `STATEGUARD_BLESS=1 cargo test --test derive docs::` and review the diff.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::status::PayoutStatus;
use stateguard::{StateMachine, docs};

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
pub(crate) enum OrderStatus {
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
    #[transition(cancel -> Cancelled, supersedes_effect)]
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
pub(crate) enum Awkward {
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

/// Database strings and transition names as people write them, which
/// renderers like to redraw: `:`, `%` and `#`, Markdown emphasis and math,
/// HTML, links and lists, Mermaid's own comment, directive, class and
/// `direction` syntax, spaces at the ends and in runs, and text beyond
/// ASCII. Every one must be drawn exactly as written.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "breaker", column = "status", key = "id", version = "version")]
pub(crate) enum Breaker {
    #[state(initial, rename = "on-hold: customer")]
    #[transition(pay_half -> Half)]
    #[transition(close -> Closed, guard = "amount_cents <= 100000 AND note <> '**x** <y> 50%'")]
    Hold,
    #[state(rename = "50% paid")]
    #[transition(mark_it_ -> Marked)]
    #[transition(escape -> Html)]
    Half,
    #[state(rename = "#1 closed (A/B)")]
    #[transition(link -> Links)]
    #[transition(_retry_ -> Hold)]
    Closed,
    #[state(rename = "**bold** _it_ $$x$$ ~~s~~ a_b")]
    #[transition(pad -> Padded)]
    Marked,
    #[state(rename = " padded  twice ")]
    #[transition(direct -> Directives)]
    Padded,
    #[state(rename = "<script>alert(1)</script> & <b>x</b> &amp; #59;")]
    #[transition(number -> Numbered)]
    Html,
    #[state(rename = "a|b `c` [l](x) www.example.com a@b.c <http://x>")]
    #[transition(brew_café -> Unicode)]
    Links,
    #[state(rename = "%%{init: {}}%% x:::y; direction LR")]
    Directives,
    #[state(rename = "1. first - second")]
    #[transition(finish -> Unicode)]
    Numbered,
    #[state(rename = "中文 😀 — ok")]
    Unicode,
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
fn breaker_docs_are_fresh() {
    assert_goldens::<Breaker>("breaker");
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
    twice::<Breaker>();
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

/// Label text: nothing that ends the statement or reads as HTML or
/// Markdown, and every `#…;` a numeric entity (Mermaid swaps those out
/// before it lexes). Returns the text as drawn: entities decoded, no-break
/// spaces as spaces.
fn check_text(text: &str) -> Result<String, String> {
    check_label(text, false)
}

/// [`check_text`] for the quoted description of `state "…" as Id`: no `"`,
/// and a `:` only before a space or at the end.
fn check_quoted(text: &str) -> Result<String, String> {
    check_label(text, true)
}

fn check_label(text: &str, quoted: bool) -> Result<String, String> {
    if text.is_empty() {
        return Err("empty text".to_owned());
    }
    if text.to_ascii_lowercase().contains("direction ") {
        return Err(format!("text {text:?} reads as a direction statement"));
    }
    if text.contains("%%") {
        return Err(format!("text {text:?} holds a comment or a directive"));
    }
    let mut out = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '#' {
            // `#` and a run of word characters closed by `;` is an entity.
            let word = rest[1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(rest.len(), |end| end + 1);
            if word > 1 && rest[word..].starts_with(';') {
                let code: u32 = rest[1..word]
                    .parse()
                    .map_err(|_| format!("text {text:?} has a named entity"))?;
                out.push(char::from_u32(code).ok_or("bad entity")?);
                rest = &rest[word + 1..];
                continue;
            }
        }
        let after = rest[c.len_utf8()..].chars().next();
        let kept_colon = quoted && c == ':' && after.is_none_or(|n| n == ' ');
        if (matches!(
            c,
            ';' | ':' | '<' | '>' | '&' | '`' | '*' | '~' | '$' | '{' | '}' | '@' | '\\'
        ) && !kept_colon)
            || (quoted && c == '"')
            || c.is_control()
        {
            return Err(format!("text {text:?} contains a raw {c:?}"));
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    Ok(out.replace('\u{a0}', " "))
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
    // state "description" as Id
    } else if let Some(rest) = s.strip_prefix("state \"") {
        let (text, id) = rest
            .rsplit_once("\" as ")
            .ok_or("a state without `\" as `")?;
        let text = check_quoted(text)?;
        d.states.entry(check_id(id)?).or_default().push(text);
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
    check_mermaid::<Breaker>();
}

#[test]
fn mermaid_checker_rejects_broken_diagrams() {
    let ok = "stateDiagram-v2\n    A : a\n    B : b\n    [*] --> A\n    A --> B : go\n";
    assert!(parse_mermaid(ok).is_ok());
    for bad in [
        "graph TD\n    A : a\n",
        "stateDiagram-v2\n    State : a\n",
        "stateDiagram-v2\n    A : a;b\n",
        "stateDiagram-v2\n    A : a:b\n",
        "stateDiagram-v2\n    state \"a:b\" as A\n",
        "stateDiagram-v2\n    state \"say \"hi\"\" as A\n",
        "stateDiagram-v2\n    A : **a**\n",
        "stateDiagram-v2\n    A : <b>a</b>\n",
        "stateDiagram-v2\n    A : direction TB\n",
        "stateDiagram-v2\n    A : 100%%\n",
        "stateDiagram-v2\n    A : #amp;\n",
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
    assert!(
        mermaid.contains("\n    state \"State\" as State_\n"),
        "{mermaid}"
    );
    assert!(
        mermaid.contains("\n    state \"End\" as End_\n"),
        "{mermaid}"
    );
    assert!(
        mermaid.contains("\n    state \"Café\" as Caf_ue9_\n"),
        "{mermaid}"
    );
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
// Mermaid, drawn by real Mermaid

pub(crate) fn require_mermaid() -> bool {
    std::env::var("STATEGUARD_REQUIRE_MERMAID").is_ok_and(|v| v == "1")
}

/// Why real Mermaid cannot run here, if it cannot: it needs Node.js, the
/// npm packages of `tools/browser-check` (`npm ci` there) and Chromium.
pub(crate) fn mermaid_missing() -> Option<String> {
    if let Some(why) = crate::common::browser_missing() {
        return Some(why);
    }
    if !root("tools/browser-check/node_modules/mermaid").is_dir() {
        return Some(
            "the mermaid package is not installed (`npm ci` in tools/browser-check)".into(),
        );
    }
    None
}

/// A JSON string.
pub(crate) fn json(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One diagram for `mermaid.mjs --expect`: where it is from, its source, and
/// the texts it must draw as written.
fn expectation(where_: &str, source: &str, texts: &[String]) -> String {
    let texts: Vec<String> = texts.iter().map(|t| json(t)).collect();
    format!(
        "{{\"where\": {}, \"source\": {}, \"texts\": [{}]}}",
        json(where_),
        json(source),
        texts.join(", ")
    )
}

/// Every state's database string and every edge label (a transition's
/// name, and its guard if it has one).
fn names<T: StateMachine>() -> Vec<String> {
    let machine = T::MACHINE;
    let mut names: Vec<String> = machine
        .states()
        .iter()
        .map(|s| s.db_str().to_owned())
        .collect();
    names.extend(machine.transitions().iter().map(|t| edge_label(t)));
    names
}

/// Runs `mermaid.mjs --expect` over `diagrams`; its output, and whether it
/// passed.
fn draw_with_mermaid(diagrams: &[String]) -> (bool, String) {
    browser_check("mermaid.mjs", diagrams)
}

/// Runs the check `script` of `tools/browser-check` with `--expect` over
/// `items` (JSON objects); its output, and whether it passed.
pub(crate) fn browser_check(script: &str, items: &[String]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("expect.json");
    std::fs::write(&file, format!("[{}]", items.join(",\n"))).unwrap();
    let output = Command::new("node")
        .arg(root(&format!("tools/browser-check/{script}")))
        .arg("--expect")
        .arg(&file)
        .output()
        .expect("run node");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The golden diagrams, the README's, and the machine built to break
/// renderers, drawn by Mermaid in Chromium: every name must be drawn as
/// written (the freshness tests keep the files equal to the generator's
/// output).
#[test]
fn mermaid_draws_every_name_as_written() {
    if let Some(why) = mermaid_missing() {
        assert!(
            !require_mermaid(),
            "{why}, but STATEGUARD_REQUIRE_MERMAID=1"
        );
        let _ = writeln!(
            std::io::stderr(),
            "skipped `mermaid_draws_every_name_as_written`: {why}"
        );
        return;
    }
    fn golden<T: StateMachine>(stem: &str) -> String {
        let path = format!("docs/{stem}.mmd");
        let source = std::fs::read_to_string(root(&path)).unwrap();
        expectation(&path, &source, &names::<T>())
    }
    let readme = std::fs::read_to_string(root("README.md")).unwrap();
    let block = docs::mermaid_block::<PayoutStatus>();
    assert!(readme.contains(&block), "the README's diagram is stale");
    let diagrams = [
        golden::<PayoutStatus>("payouts"),
        golden::<OrderStatus>("large"),
        golden::<Awkward>("awkward"),
        golden::<Breaker>("breaker"),
        expectation(
            "README.md",
            &docs::mermaid::<PayoutStatus>(),
            &names::<PayoutStatus>(),
        ),
    ];
    let (passed, output) = draw_with_mermaid(&diagrams);
    assert!(passed, "{output}");

    // Text beyond these machines: every ASCII punctuation character alone,
    // doubled, inside a word, between spaces and around a word, and forms
    // that Mermaid, HTML or Markdown read as syntax, as state descriptions
    // and as edge labels.
    let mut samples: Vec<String> = Vec::new();
    for c in (' '..='~').filter(char::is_ascii_punctuation) {
        samples.extend([
            format!("{c}"),
            format!("{c}{c}"),
            format!("a{c}b"),
            format!("a {c} b"),
            format!("{c}x{c}"),
        ]);
    }
    samples.extend(
        [
            "#1;",
            "#x;",
            "#amp;",
            "x#58;y",
            "&#58;",
            "&lt;",
            "&",
            "a&&b",
            "%%",
            "100%%",
            "%%{init: {}}%%",
            "@{ shape: rect }",
            "direction TB",
            "direction  LR",
            "Note right of x : y",
            "state x as y",
            "class x y",
            "x:::y",
            "a::b",
            "[*] --> x",
            "end",
            "**b**",
            "*i*",
            "_i_",
            "__b__",
            "a_b_c",
            "~~s~~",
            "$x$",
            "$$x$$",
            "`c`",
            "``c``",
            "<b>x</b>",
            "<br>",
            "<script>alert(1)</script>",
            "<!-- x -->",
            "<http://x>",
            "http://x.y/z",
            "www.example.com",
            "a@b.com",
            "[a](b)",
            "![a](b)",
            "[a][b]",
            "# h",
            "## h",
            "> q",
            "- i",
            "+ i",
            "* i",
            "1. i",
            "1) i",
            "---",
            "***",
            "___",
            "===",
            "- - -",
            "    four",
            " a",
            "a ",
            "  a  b  ",
            "a\u{a0}b",
            "a\u{2003}b",
            "a\u{200b}b",
            "中文 😀",
            "café",
        ]
        .map(str::to_owned),
    );
    let synthetic: Vec<String> = samples
        .chunks(24)
        .enumerate()
        .map(|(n, chunk)| {
            let mut source = String::from("stateDiagram-v2\n");
            for (i, text) in chunk.iter().enumerate() {
                let quoted = stateguard::__private::mermaid_quoted(text);
                let label = stateguard::__private::mermaid_text(text);
                source.push_str(&format!(
                    "    state \"{quoted}\" as S{i}\n    S{i} --> T{i} : {label}\n"
                ));
            }
            let twice: Vec<String> = chunk.iter().flat_map(|t| [t.clone(), t.clone()]).collect();
            expectation(&format!("samples {n}"), &source, &twice)
        })
        .collect();
    let (passed, output) = draw_with_mermaid(&synthetic);
    assert!(passed, "{output}");

    // And the check can fail: Markdown in a label is drawn as emphasis.
    let (passed, output) = draw_with_mermaid(&[expectation(
        "emphasis",
        "stateDiagram-v2\n    A : **a** b\n",
        &["**a** b".to_owned()],
    )]);
    assert!(!passed, "{output}");
    assert!(output.contains("not drawn as written"), "{output}");
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
    check_markdown::<Breaker>();
}

/// `markdown` as GitHub renders it: GFM tables, strikethrough and
/// autolinks, and raw HTML let through (so an unescaped tag would show).
fn render_gfm(markdown: &str) -> String {
    let mut options = comrak::Options::default();
    options.extension.table = true;
    options.extension.strikethrough = true;
    options.extension.autolink = true;
    options.render.r#unsafe = true;
    comrak::markdown_to_html(markdown, &options)
}

/// The rendered tables: rows of cells, each cell's text with its
/// `<code>` spans unwrapped and entities decoded. Any other tag in a cell
/// fails: text from the machine must never become markup.
fn html_tables(html: &str) -> Vec<Vec<Vec<String>>> {
    let mut tables = Vec::new();
    for table in html.split("<table>").skip(1) {
        let table = &table[..table.find("</table>").expect("a closed table")];
        let mut rows = Vec::new();
        for row in table.split("<tr>").skip(1) {
            let row = &row[..row.find("</tr>").expect("a closed row")];
            let mut cells = Vec::new();
            for cell in row.split("<t").skip(1) {
                let Some(cell) = cell.strip_prefix('d').or_else(|| cell.strip_prefix('h')) else {
                    panic!("markup in a row: {row}");
                };
                let body = &cell[cell.find('>').unwrap() + 1..];
                let body = &body[..body.find("</t").expect("a closed cell")];
                let text = body.replace("<code>", "").replace("</code>", "");
                assert!(!text.contains('<'), "markup in a cell: {body}");
                cells.push(decode_xml(&text));
            }
            rows.push(cells);
        }
        tables.push(rows);
    }
    tables
}

/// The Markdown page rendered by a GFM renderer: two tables whose cells hold
/// the machine's names exactly, whatever characters they contain.
fn check_rendered_markdown<T: StateMachine>() {
    let machine = T::MACHINE;
    let markdown = docs::markdown::<T>();
    let html = render_gfm(&markdown);
    let tables = html_tables(&html);
    assert_eq!(tables.len(), 2, "{html}");
    let (states, transitions) = (&tables[0], &tables[1]);
    assert_eq!(states.len(), 1 + machine.states().len(), "{html}");
    for (cells, state) in states[1..].iter().zip(machine.states()) {
        assert_eq!(cells.len(), 5, "{cells:?}");
        assert_eq!(cells[0], state.variant());
        assert_eq!(cells[1], state.db_str());
    }
    let guarded = machine.transitions().iter().any(|t| t.guard().is_some());
    assert_eq!(transitions.len(), 1 + machine.transitions().len(), "{html}");
    for (cells, transition) in transitions[1..].iter().zip(machine.transitions()) {
        assert_eq!(cells.len(), 4 + usize::from(guarded), "{cells:?}");
        assert_eq!(cells[0], transition.name());
        let from: Vec<&str> = transition
            .sources()
            .iter()
            .map(|&s| machine.state(s).unwrap().variant())
            .collect();
        assert_eq!(cells[1], from.join(", "));
        assert_eq!(
            cells[2],
            machine.state(transition.target()).unwrap().variant()
        );
        if guarded {
            assert_eq!(cells[3], transition.guard().unwrap_or_default());
        }
    }
}

/// A row's history page, with notes and a heading that hold Markdown and
/// HTML, rendered by a GFM renderer: the heading and every cell as written.
#[test]
fn history_markdown_renders_as_written() {
    let machine = Breaker::MACHINE;
    let moves = [
        (Breaker::Hold, Breaker::Half, "pay_half"),
        (Breaker::Half, Breaker::Html, "escape"),
    ];
    let rows: Vec<stateguard::HistoryRow<Breaker>> = moves
        .iter()
        .enumerate()
        .map(|(i, &(from, to, name))| stateguard::HistoryRow {
            transition: machine
                .transitions()
                .iter()
                .find(|t| t.name() == name)
                .unwrap(),
            from,
            to,
            occurrence: i as i64 + 1,
            at: format!("2026-11-30 09:3{i}:07.412 | <b>"),
            at_unix_micros: 1_764_495_067_412_000 + i as i64 * 60_000_000,
            actor: Some("<script>x</script> **ops** `bot`".to_owned()),
            reason: (i == 0).then(|| "a|b \\ [l](x) _i_ &amp; ~~s~~ #1 $$x$$".to_owned()),
            details: None,
        })
        .collect();
    let heading = "Payout <b>42</b> | **x** #";
    let html = render_gfm(&docs::history_markdown::<Breaker>(heading, &rows));
    let h2 = &html[html.find("<h2>").unwrap() + 4..html.find("</h2>").unwrap()];
    assert!(!h2.contains('<'), "{h2}");
    assert_eq!(decode_xml(h2), heading);
    let tables = html_tables(&html);
    assert_eq!(tables.len(), 1, "{html}");
    assert_eq!(tables[0].len(), 1 + rows.len(), "{html}");
    for (cells, row) in tables[0][1..].iter().zip(&rows) {
        let variant = |s: Breaker| machine.state(s).unwrap().variant().to_owned();
        let expected = [
            row.occurrence.to_string(),
            row.at.clone(),
            row.transition.name().to_owned(),
            variant(row.from),
            variant(row.to),
            row.occurrence.to_string(),
            row.actor.clone().unwrap_or_default(),
            row.reason.clone().unwrap_or_default(),
        ];
        assert_eq!(cells[..], expected[..], "{html}");
    }
}

#[test]
fn markdown_renders_as_tables_with_every_name_as_written() {
    check_rendered_markdown::<PayoutStatus>();
    check_rendered_markdown::<OrderStatus>();
    check_rendered_markdown::<Awkward>();
    check_rendered_markdown::<Breaker>();
    // And the checks can fail: a bare `|` splits a cell, a bare tag is markup.
    let split = html_tables(&render_gfm("| a | b |\n| --- | --- |\n| `x|y` | z |\n"));
    assert_ne!(split[0][1], ["x|y", "z"]);
    let tag = render_gfm("| a |\n| --- |\n| <b>z</b> |\n");
    assert!(
        std::panic::catch_unwind(|| html_tables(&tag)).is_err(),
        "{tag}"
    );
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

/// The text of every `<text>` element of an SVG, as a browser draws it:
/// entities decoded, spaces at the ends dropped and runs of them merged (SVG's
/// default white-space handling), then no-break spaces read as spaces.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut texts = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text") {
        let open = &rest[at..];
        let start = open.find('>').expect("a closed <text> tag") + 1;
        let end = open.find("</text>").expect("a </text>");
        let decoded = decode_xml(&open[start..end]);
        let drawn: Vec<&str> = decoded.split(' ').filter(|w| !w.is_empty()).collect();
        texts.push(drawn.join(" ").replace('\u{a0}', " "));
        rest = &open[end..];
    }
    texts
}

/// XML character data with its entities decoded.
fn decode_xml(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').expect("a closed entity") + at;
        let name = &rest[at + 1..end];
        let c = match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = match name.strip_prefix("#x") {
                    Some(hex) => u32::from_str_radix(hex, 16),
                    None => name.strip_prefix('#').expect("a numeric entity").parse(),
                };
                char::from_u32(code.expect("an entity's code")).expect("a character")
            }
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn check_dot<T: StateMachine>() {
    let source = docs::dot::<T>();
    assert!(
        source.starts_with(&format!("digraph \"{}\" {{\n", T::MACHINE.name())),
        "{source}"
    );
    let svg = render_svg(&source);
    let texts = svg_texts(&svg);
    let drawn = |text: &str| {
        assert!(
            texts.iter().any(|t| t == text),
            "{text:?} is not drawn as written; the SVG's texts are {texts:?}\n{source}"
        );
    };
    for state in T::MACHINE.states() {
        let title = format!("<title>{}</title>", svg_title(state.variant()));
        assert!(svg.contains(&title), "no {title} in the SVG of\n{source}");
        drawn(state.variant());
        drawn(state.db_str());
    }
    for transition in T::MACHINE.transitions() {
        drawn(&edge_label(transition));
    }
}

/// A node's name as Graphviz writes it into the SVG's `<title>`.
fn svg_title(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('-', "&#45;")
}

#[test]
fn graphviz_renders_the_dot_output() {
    if !graphviz_available() {
        return;
    }
    check_dot::<PayoutStatus>();
    check_dot::<OrderStatus>();
    check_dot::<Awkward>();
    check_dot::<Breaker>();
    // And the check can fail: a name Graphviz draws differently is caught.
    let svg = render_svg("digraph { a [label=\" x  y\"]; }");
    assert!(svg_texts(&svg).iter().all(|t| t != " x  y"), "{svg}");
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
