//! The state diagram: the drawing the derive puts into each machine's
//! rustdoc is the one `docs::svg` draws at run time, and every drawing
//! parses as XML and shows every state, database string and transition as
//! written, the awkward names of `docs.rs` included, with markup in them
//! kept as text.

use std::path::Path;

use crate::docs::{
    Awkward, Breaker, OrderStatus, browser_check, json, mermaid_missing, require_mermaid,
};
use crate::status::PayoutStatus;
use stateguard::{StateMachine, docs};

/// The texts a drawing shows, each `<text>` element's whole content, and
/// the names of the elements it has.
fn parse(drawn: &str) -> (Vec<String>, Vec<String>) {
    let doc = roxmltree::Document::parse(drawn)
        .unwrap_or_else(|e| panic!("the drawing is not XML ({e}): {drawn}"));
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or_default().to_owned())
        .collect();
    let elements = doc
        .descendants()
        .filter(|n| n.is_element())
        .map(|n| n.tag_name().name().to_owned())
        .collect();
    (texts, elements)
}

/// `text` as the drawing writes a name: control characters as Rust
/// escapes.
fn shown(text: &str) -> String {
    text.replace('\n', "\\n")
}

fn assert_drawn<T: StateMachine>() {
    let drawn = docs::svg::<T>();
    assert!(!drawn.contains('\n'), "one line");
    let (texts, elements) = parse(&drawn);
    for element in &elements {
        assert!(
            ["svg", "title", "path", "polygon", "rect", "text", "circle"]
                .contains(&element.as_str()),
            "{element} in {drawn}"
        );
    }
    let machine = T::MACHINE;
    for state in machine.states() {
        assert!(
            texts.contains(&shown(state.variant())),
            "{}",
            state.variant()
        );
        let db = format!("'{}'", shown(state.db_str()));
        assert!(texts.contains(&db), "{db} not among {texts:?}");
    }
    for t in machine.transitions() {
        let label = match t.guard() {
            Some(guard) => format!("{} [{}]", t.name(), shown(guard)),
            None => t.name().to_owned(),
        };
        let edges = texts.iter().filter(|text| **text == label).count();
        assert_eq!(edges, t.sources().len(), "{label}: one label per edge");
    }
    for state in machine.states().iter().filter(|s| s.in_flight().is_some()) {
        assert!(
            texts.iter().any(|t| t.starts_with("in flight · lease ")),
            "{}'s lease",
            state.variant()
        );
    }
}

#[test]
fn every_machine_is_drawn_as_written() {
    assert_drawn::<PayoutStatus>();
    assert_drawn::<OrderStatus>();
    assert_drawn::<Awkward>();
    assert_drawn::<Breaker>();
}

#[test]
fn the_rustdoc_diagram_is_the_run_time_drawing() {
    // The expansion snapshot holds the derive's rustdoc of the payout
    // enum, as a `///` line.
    let snapshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/expand/payouts.expanded.rs");
    let snapshot = std::fs::read_to_string(snapshot).expect("the expansion snapshot");
    let open = "<div class=\"stateguard-diagram\">";
    let line = snapshot
        .lines()
        .find_map(|line| line.trim().strip_prefix("///")?.strip_prefix(open))
        .expect("the diagram's rustdoc line");
    let documented = line
        .strip_suffix("</div>")
        .expect("the div closes the line");
    assert_eq!(documented, docs::svg::<PayoutStatus>());
}

/// What `T`'s drawing must show, each text as many times as it is drawn:
/// every state's name and database string, and each edge's label.
fn texts<T: StateMachine>() -> Vec<String> {
    let machine = T::MACHINE;
    let mut texts = Vec::new();
    for state in machine.states() {
        texts.push(shown(state.variant()));
        texts.push(format!("'{}'", shown(state.db_str())));
    }
    for t in machine.transitions() {
        let label = match t.guard() {
            Some(guard) => format!("{} [{}]", t.name(), shown(guard)),
            None => t.name().to_owned(),
        };
        texts.extend(t.sources().iter().map(|_| label.clone()));
    }
    texts
}

/// One drawing for `diagram.mjs --expect`.
fn expectation<T: StateMachine>(where_: &str) -> String {
    let texts: Vec<String> = texts::<T>().iter().map(|t| json(t)).collect();
    format!(
        "{{\"where\": {}, \"svg\": {}, \"texts\": [{}]}}",
        json(where_),
        json(&docs::svg::<T>()),
        texts.join(", ")
    )
}

/// Every drawing, shown by Chromium: it has a size, every text is drawn
/// inside it, every name as written, and the markup in the awkward names
/// opens no dialog and logs no error.
#[test]
fn chromium_draws_every_name_as_written() {
    if let Some(why) = mermaid_missing() {
        assert!(
            !require_mermaid(),
            "STATEGUARD_REQUIRE_MERMAID=1, but {why}"
        );
        println!("skipped: {why}");
        return;
    }
    let drawings = [
        expectation::<PayoutStatus>("PayoutStatus"),
        expectation::<OrderStatus>("OrderStatus"),
        expectation::<Awkward>("Awkward"),
        expectation::<Breaker>("Breaker"),
    ];
    let (passed, text) = browser_check("diagram.mjs", &drawings);
    assert!(passed, "{text}");
    assert_eq!(text.matches("ok    ").count(), drawings.len(), "{text}");
}
