//! The operators' console, served for real and read over HTTP: the
//! overview shows each machine's diagram and the rows in each state, which
//! match the table's own `COUNT(*)`; a machine whose rows cannot be read
//! shows why, escaped, and the page still answers.

use crate::common;

use common::{Db, PayoutStatus, TestBackend};
use stateguard::StateMachine;
use stateguard::bounds::Key;
use stateguard::console::Console;

crate::backend_tests! {
    "console_overview" => the_overview_counts_what_the_table_holds,
}

/// A machine whose table does not exist.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "no_such_table_here", column = "status", key = "id")]
enum Missing {
    #[state(initial)]
    #[transition(go -> Gone)]
    Here,
    Gone,
}

async fn the_overview_counts_what_the_table_holds<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.seed(12).await;
    for id in 1..=5 {
        let sending = PayoutStatus::start().apply(&db.pool, id).await;
        assert!(sending.expect("start").is_applied());
    }
    let cancelled = PayoutStatus::cancel().apply(&db.pool, 6_i64).await;
    assert!(cancelled.expect("cancel").is_applied());

    let router: axum::Router = axum::Router::new().nest(
        "/ops",
        Console::new(db.pool.clone())
            .machine::<PayoutStatus>()
            .machine::<Missing>()
            .router(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let response = reqwest::get(format!("http://{address}/ops"))
        .await
        .expect("GET /ops");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let page = response.text().await.expect("body");

    // Each state's row, with the count the table holds, checked with SQL.
    for state in PayoutStatus::MACHINE.states() {
        let db_str = state.db_str();
        let rows = db.count_in(db_str).await;
        let row = format!("data-state=\"{db_str}\" data-rows=\"{rows}\" data-more=\"false\"");
        assert!(page.contains(&row), "no `{row}` in:\n{page}");
    }
    assert!(page.contains("data-rows=\"5\""), "five rows sending");
    // The diagram is the machine's own drawing, inline.
    let svg = stateguard::docs::svg::<PayoutStatus>();
    assert!(page.contains(&svg), "the overview embeds docs::svg");
    // The machine that cannot be read shows why, and the page answered.
    let missing = page
        .split("data-machine=\"Missing\"")
        .nth(1)
        .expect("a section for Missing");
    assert!(
        missing.contains("The rows could not be counted"),
        "{missing}"
    );
    assert!(missing.contains("no_such_table_here"), "{missing}");
    // Nothing else than the two sections' counts tables: one per machine
    // that could be read.
    assert_eq!(page.matches("<table class=\"counts\">").count(), 1);

    // Only the overview is served: no route answers a write.
    let client = reqwest::Client::new();
    let post = client
        .post(format!("http://{address}/ops"))
        .send()
        .await
        .expect("POST /ops");
    assert_eq!(post.status(), 405);
    server.abort();
}
