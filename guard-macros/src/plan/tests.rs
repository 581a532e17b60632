use super::*;

/// The tag column of `tag`, checking `$n`.
fn column(tag: &str, n: usize) -> String {
    tag_column(tag, &format!("${n}"))
}

fn marked() -> String {
    format!(
        "UPDATE t SET b = {} WHERE k = {} AND CAST(k AS TEXT) = {} AND p = '$[*]?'",
        Slot::Value(0).mark(),
        Slot::Key(0).mark(),
        Slot::Key(0).mark(),
    )
}

#[test]
fn numbered_dialects_bind_each_slot_once_in_slot_order() -> Result<(), String> {
    let pg = render(Dialect::Postgres, &marked())?;
    let tag = pg.tag.clone().unwrap_or_default();
    assert_eq!(
        pg.text,
        format!(
            "UPDATE t SET b = $2 WHERE k = $1 AND CAST(k AS TEXT) = $1 AND p = '$[*]?' \
             RETURNING {}",
            column(&tag, 3)
        )
    );
    assert_eq!(pg.plan, [Slot::Key(0), Slot::Value(0), Slot::Tag]);
    let lite = render(Dialect::Sqlite, &marked())?;
    assert_eq!(
        lite.text,
        "UPDATE t SET b = ?2 WHERE k = ?1 AND CAST(k AS TEXT) = ?1 AND p = '$[*]?'"
    );
    assert_eq!(lite.plan, pg.plan[..2]);
    Ok(())
}

#[test]
fn mysql_binds_every_placeholder_in_text_order() -> Result<(), String> {
    let my = render(Dialect::MySql, &marked())?;
    assert_eq!(
        my.text,
        "UPDATE t SET b = ? WHERE k = ? AND CAST(k AS TEXT) = ? AND p = '$[*]?'"
    );
    assert_eq!(my.plan, [Slot::Value(0), Slot::Key(0), Slot::Key(0)]);
    Ok(())
}

#[test]
fn a_placeholder_outside_the_plan_is_refused() {
    let text = format!("SELECT 1 WHERE a = ? AND k = {}", Slot::Key(0).mark());
    assert!(render(Dialect::MySql, &text).is_err());
    // The tag is bound second.
    let text = format!("SELECT 1 WHERE a = $3 AND k = {}", Slot::Key(0).mark());
    assert!(render(Dialect::Postgres, &text).is_err());
    assert!(render(Dialect::Postgres, "SELECT \u{1}k0").is_err());
    assert!(render(Dialect::Postgres, "SELECT \u{1}x0\u{2}").is_err());
}

#[test]
fn result_columns_are_read_off_their_markers() -> Result<(), String> {
    let text = format!(
        "SELECT {}, {} FROM t WHERE k = {}",
        Col::Status.of("s"),
        Col::Occurrence.of("v"),
        Slot::Key(0).mark()
    );
    let lite = render(Dialect::Sqlite, &text)?;
    assert_eq!(lite.text, "SELECT s, v FROM t WHERE k = ?1");
    assert_eq!(lite.returns, [Col::Status, Col::Occurrence]);
    let twice = format!("SELECT {}, {}", Col::Token.of("a"), Col::Token.of("b"));
    assert!(render(Dialect::MySql, &twice).is_err());
    let late = format!("SELECT {}, {}", Col::Token.of("a"), Col::Key(0).of("k"));
    assert!(render(Dialect::MySql, &late).is_err());
    Ok(())
}

#[test]
fn postgres_statements_return_their_tag_first() -> Result<(), String> {
    let select = format!(
        "WITH m AS (SELECT k FROM t) SELECT {}, {} FROM m WHERE k = {}",
        Col::Key(0).of("k"),
        Col::Status.of("s"),
        Slot::Key(0).mark()
    );
    let pg = render(Dialect::Postgres, &select)?;
    let tag = pg.tag.clone().unwrap_or_default();
    assert!(tag.starts_with("stateguard ") && tag.len() == 27, "{tag}");
    assert_eq!(
        pg.text,
        format!(
            "WITH m AS (SELECT k FROM t) SELECT {}, k, s FROM m WHERE k = $1",
            column(&tag, 2)
        )
    );
    assert_eq!(pg.plan, [Slot::Key(0), Slot::Tag]);
    assert_eq!(pg.returns, [Col::Tag, Col::Key(0), Col::Status]);
    // A statement that returns nothing else returns its tag, once per
    // row it changes.
    let update = render(Dialect::Postgres, "UPDATE t SET s = 'b'")?;
    let tag = update.tag.clone().unwrap_or_default();
    assert_eq!(
        update.text,
        format!("UPDATE t SET s = 'b' RETURNING {}", column(&tag, 1))
    );
    assert_eq!(update.returns, [Col::Tag]);
    // A builder may place it itself, where nothing else is returned.
    let placed = format!(
        "WITH m AS (UPDATE t SET s = 'b') SELECT {} FROM m",
        Col::Tag.of(TAG)
    );
    let placed = render(Dialect::Postgres, &placed)?;
    let tag = placed.tag.clone().unwrap_or_default();
    assert_eq!(
        placed.text,
        format!(
            "WITH m AS (UPDATE t SET s = 'b') SELECT {} FROM m",
            column(&tag, 1)
        )
    );
    // No two statements share a tag; the other dialects have none.
    assert_ne!(update.tag, pg.tag);
    assert_ne!(update.tag, placed.tag);
    assert_eq!(render(Dialect::Sqlite, &select)?.tag, None);
    assert_eq!(render(Dialect::MySql, &select)?.tag, None);
    // Only first.
    let late = format!("SELECT {}, {}", Col::Status.of("s"), Col::Tag.of(TAG));
    assert!(render(Dialect::Sqlite, &late).is_err());
    Ok(())
}

#[test]
fn every_slot_survives_its_marker() {
    let all = [
        Slot::Row(0, 0),
        Slot::Row(63, 7),
        Slot::Keys(1),
        Slot::Ints(2),
        Slot::Key(3),
        Slot::Value(5),
        Slot::Age,
        Slot::Delay,
        Slot::Expected,
        Slot::Token,
        Slot::Limit,
        Slot::State,
        Slot::Actor,
        Slot::Reason,
        Slot::Details,
        Slot::EffectKey,
        Slot::EffectKeys,
        Slot::RowEffectKey(63),
        Slot::Tag,
    ];
    for slot in all {
        let text = slot.mark();
        assert_eq!(Slot::parse(&text[1..text.len() - 1]), Some(slot));
    }
    // A row's cell names both numbers, each within a byte.
    for broken in ["R1", "R1.", "R.1", "R1.x", "R256.0", "R1.2.3"] {
        assert_eq!(Slot::parse(broken), None, "{broken}");
    }
}
