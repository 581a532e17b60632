use super::layout::{Rect, layout};
use super::{Arrow, Diagram, InFlight, Role, State, svg};

fn state<'a>(name: &'a str, db: &'a str) -> State<'a> {
    State {
        name,
        db,
        ..State::default()
    }
}

fn move_<'a>(name: &'a str, sources: &[usize], target: usize) -> Arrow<'a> {
    Arrow {
        name,
        sources: sources.iter().map(|&s| (s, Role::Move)).collect(),
        target,
        ..Arrow::default()
    }
}

/// The payout machine: a guard, an in-flight state with retries and its
/// two follow-ups, a move out of it, and a retry that leads back up.
fn payouts() -> Diagram<'static> {
    let mut states = vec![
        state("Pending", "pending"),
        state("Sending", "sending"),
        state("Sent", "sent"),
        state("Failed", "failed"),
        state("Cancelled", "cancelled"),
    ];
    states[0].initial = true;
    states[1].in_flight = Some(InFlight {
        lease: "30s",
        attempts: Some(5),
    });
    let mut transitions = vec![
        move_("start", &[0], 1),
        move_("confirm", &[1], 2),
        move_("fail", &[1], 3),
        move_("cancel", &[0, 1], 4),
        move_("retry", &[3], 1),
    ];
    transitions[0].guard = Some("amount_cents <= 95000");
    transitions[1].sources[0].1 = Role::Done;
    transitions[2].sources[0].1 = Role::Failed;
    Diagram {
        name: "PayoutStatus",
        states,
        transitions,
    }
}

/// Names that break naive drawings: markup, quotes, entities, spaces at
/// the ends and in runs, a line break, and wide characters.
fn awkward() -> Diagram<'static> {
    let mut states = vec![
        state("Start", "<script>alert(1)</script> & <b>x</b> &amp;"),
        state("Café", "\"><img src=x onerror=alert(1)>"),
        state("r#type", " padded  twice "),
        state("Wide", "中文 😀 — ok\nnext"),
    ];
    states[0].initial = true;
    let mut transitions = vec![
        move_("go", &[0], 1),
        move_("go_on", &[1], 2),
        move_("wide", &[0, 2], 3),
    ];
    transitions[2].guard = Some("a < b AND c <> 'x'\nOR d");
    Diagram {
        name: "Awkward",
        states,
        transitions,
    }
}

/// The texts the drawing shows, each `<text>` element's whole content.
fn texts(drawn: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(drawn).expect("the drawing is XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn every_state_and_transition_is_drawn_as_written() {
    for machine in [payouts(), awkward()] {
        let drawn = svg(&machine);
        let shown = texts(&drawn);
        for s in &machine.states {
            assert!(shown.iter().any(|t| t == s.name), "{} missing", s.name);
            let db = format!("'{}'", s.db.replace('\n', "\\n"));
            assert!(shown.contains(&db), "{db} missing from {shown:?}");
        }
        for t in &machine.transitions {
            let label = match t.guard {
                Some(guard) => format!("{} [{}]", t.name, guard.replace('\n', "\\n")),
                None => t.name.to_owned(),
            };
            let edges = t.sources.len();
            let count = shown.iter().filter(|s| **s == label).count();
            assert_eq!(count, edges, "{label}: one label per edge");
        }
    }
}

#[test]
fn markup_in_a_name_stays_text() {
    let drawn = svg(&awkward());
    let doc = roxmltree::Document::parse(&drawn).expect("XML");
    let elements: Vec<&str> = doc
        .descendants()
        .filter(|n| n.is_element())
        .map(|n| n.tag_name().name())
        .collect();
    for tag in &elements {
        assert!(
            ["svg", "title", "path", "polygon", "rect", "text", "circle"].contains(tag),
            "an element the drawing does not write: {tag}"
        );
    }
    assert!(!drawn.contains("<script"), "{drawn}");
    assert!(!drawn.contains("<img"), "{drawn}");
}

#[test]
fn the_drawing_is_one_element_on_one_line() {
    for machine in [payouts(), awkward()] {
        let drawn = svg(&machine);
        assert!(drawn.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(drawn.ends_with("</svg>"));
        assert!(!drawn.contains('\n'));
        // Nothing that would reach outside the drawing in a page.
        for outside in ["<style", " id=", " class=", "<script", "href"] {
            assert!(!drawn.contains(outside), "{outside}");
        }
    }
}

#[test]
fn the_drawing_is_the_same_every_time() {
    assert_eq!(svg(&payouts()), svg(&payouts()));
}

fn overlap(a: &Rect, b: &Rect) -> bool {
    a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h
}

#[test]
fn boxes_and_labels_do_not_cover_one_another() {
    for machine in [payouts(), awkward()] {
        let laid = layout(&machine);
        for (i, a) in laid.boxes.iter().enumerate() {
            for b in &laid.boxes[i + 1..] {
                assert!(!overlap(a, b), "{a:?} and {b:?}");
            }
            for edge in &laid.edges {
                assert!(!overlap(a, &edge.label), "{:?} covers a box", edge.label);
            }
            assert!(a.x >= 0.0 && a.x + a.w <= laid.width, "{a:?}");
            assert!(a.y >= 0.0 && a.y + a.h <= laid.height, "{a:?}");
        }
    }
}

#[test]
fn moves_lead_down_and_retries_lead_back_up() {
    let laid = layout(&payouts());
    let y = |s: usize| laid.boxes[s].y;
    // Pending, then Sending, then the states it moves to.
    assert!(y(0) < y(1));
    assert!(y(1) < y(2) && y(1) < y(3));
    // Cancelled is below both of its sources.
    assert!(y(1) < y(4));
    // The retry starts at Failed's top and ends at Sending's bottom.
    let retry = laid
        .edges
        .iter()
        .find(|e| e.transition == 4)
        .expect("retry");
    let (start, end) = (retry.points[0], *retry.points.last().expect("points"));
    assert_eq!(start.1, laid.boxes[3].y);
    assert_eq!(end.1, laid.boxes[1].y + laid.boxes[1].h);
    // Every other edge leaves its source's bottom and enters its target's
    // top.
    for edge in laid.edges.iter().filter(|e| e.transition != 4) {
        let t = &payouts().transitions[edge.transition];
        let target = laid.boxes[t.target];
        assert_eq!(edge.points.last().expect("points").1, target.y);
    }
}

#[test]
fn a_follow_up_is_coloured_only_where_it_leaves_its_in_flight_state() {
    // `cancel` is Sending's `failed` follow-up, and a caller's move from
    // Pending.
    let mut machine = payouts();
    machine.transitions[3].sources[1].1 = Role::Failed;
    let laid = layout(&machine);
    let cancels: Vec<_> = laid.edges.iter().filter(|e| e.transition == 3).collect();
    assert_eq!(cancels.len(), 2);
    let from = |edge: &&super::layout::Edge| edge.points[0].1;
    let (pending, sending) = match from(&cancels[0]) < from(&cancels[1]) {
        true => (cancels[0], cancels[1]),
        false => (cancels[1], cancels[0]),
    };
    assert_eq!(pending.role, Role::Move);
    assert_eq!(sending.role, Role::Failed);
}

#[test]
fn the_legend_names_only_the_marks_the_machine_uses() {
    let drawn = svg(&payouts());
    for mark in [
        "initial",
        "final",
        "in flight",
        "done follow-up",
        "failed follow-up",
    ] {
        assert!(drawn.contains(mark), "{mark}");
    }
    // A cycle with no final state and nothing in flight.
    let mut states = vec![state("On", "on"), state("Off", "off")];
    states[0].initial = true;
    let machine = Diagram {
        name: "Switch",
        states,
        transitions: vec![move_("off", &[0], 1), move_("on", &[1], 0)],
    };
    let drawn = svg(&machine);
    assert!(drawn.contains("● initial"));
    for mark in ["final", "in flight", "follow-up"] {
        assert!(!drawn.contains(mark), "{mark}");
    }
}

#[test]
fn a_line_break_is_measured_as_it_is_drawn() {
    let machine = awkward();
    let laid = layout(&machine);
    let wide = &laid.boxes[3];
    // `'中文 😀 — ok\nnext'`: the escape's two characters count.
    let shown = "'中文 😀 — ok\\nnext'";
    assert!(wide.w >= super::layout::text_width(shown, 12.0));
    let label = laid.edges.iter().find(|e| e.transition == 2).expect("wide");
    let text = "wide [a < b AND c <> 'x'\\nOR d]";
    assert!(label.label.w >= super::layout::text_width(text, 12.0));
}

#[test]
fn an_edge_over_several_layers_goes_around_the_layers_between() {
    // A → B → C → D, and A → D: the long edge passes a point in B's and
    // C's layers, beside them.
    let mut states = vec![
        state("A", "a"),
        state("B", "b"),
        state("C", "c"),
        state("D", "d"),
    ];
    states[0].initial = true;
    let machine = Diagram {
        name: "Chain",
        states,
        transitions: vec![
            move_("ab", &[0], 1),
            move_("bc", &[1], 2),
            move_("cd", &[2], 3),
            move_("skip", &[0], 3),
        ],
    };
    let laid = layout(&machine);
    let skip = laid.edges.iter().find(|e| e.transition == 3).expect("skip");
    // Source bottom, two points in each of the two layers between, target top.
    assert_eq!(skip.points.len(), 6);
    for (layer, box_) in [(1, laid.boxes[1]), (2, laid.boxes[2])] {
        let (top, bottom) = (skip.points[2 * layer - 1], skip.points[2 * layer]);
        assert_eq!((top.1, bottom.1), (box_.y, box_.y + box_.h));
        assert!(
            top.0 < box_.x || top.0 > box_.x + box_.w,
            "through {box_:?}"
        );
    }
}

#[test]
fn a_door_is_drawn_on_one_line() {
    let machine = Diagram {
        name: "Door",
        states: vec![
            State {
                name: "Closed",
                db: "closed",
                initial: true,
                ..State::default()
            },
            state("Open", "open"),
        ],
        transitions: vec![move_("open", &[0], 1), move_("close", &[1], 0)],
    };
    let drawn = svg(&machine);
    assert!(drawn.starts_with("<svg "));
    assert!(drawn.contains(">Closed</text>") && drawn.contains(">close</text>"));
    assert!(!drawn.contains('\n'));
}
