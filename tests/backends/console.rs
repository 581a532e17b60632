//! The operators' console, served for real and read over HTTP:
//! - the overview shows each machine's diagram and the rows in each
//!   state, which match the table's own `COUNT(*)`; a machine whose rows
//!   cannot be read shows why, escaped, and the page still answers;
//! - a state's page lists its rows in key order, page by page, as SQL
//!   finds them, with their age where the machine keeps one;
//! - a row's page shows its state, occurrence, effect key, buttons and
//!   history, every value escaped;
//! - with actions on, a press moves the row and the history names the
//!   operator; a press from a stale page is `Stale` and moves nothing; a
//!   press from another site, or without the page's token or an operator,
//!   is refused; with actions off no page has a form and a POST is 405;
//! - the outbox's dead letters are listed on the overview, and with
//!   actions on a press requeues one, once;
//! - in headless Chromium (`tools/browser-check/console.mjs`), an operator
//!   follows the links, presses a button and meets a stale page, and no
//!   script runs from a hostile note.

use std::net::SocketAddr;

use crate::common;

use common::{Bind, Db, EveryColumn, PayoutStatus, TestBackend};
use stateguard::bounds::{FollowUpValues, Key};
use stateguard::console::{Console, ConsoleKey, Operator};
use stateguard::ddl::Dialect;
use stateguard::idempotency::{self, Request};
use stateguard::outbox::{self, Message, MessageState, Relay};
use stateguard::{Effect, Finished, Note, Retry, StateMachine, Stores, Tx};

crate::backend_tests! {
    "console_overview" => the_overview_counts_what_the_table_holds,
    "console_pages" => the_pages_show_what_the_tables_hold,
    "console_actions" => a_press_moves_the_row_once_and_names_the_operator,
    "console_browser" => an_operator_uses_the_console_in_chromium,
    "console_outbox" => dead_letters_are_listed_and_requeued,
    "console_unread" => a_press_whose_row_cannot_be_read_again_still_says_it_moved,
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
    i64: Key<DB> + ConsoleKey<PayoutStatus, DB> + ConsoleKey<Missing, DB>,
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
            .machine::<PayoutStatus, i64>()
            .machine::<Missing, i64>()
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

    // Without actions, no route answers a write.
    let client = reqwest::Client::new();
    let post = client
        .post(format!("http://{address}/ops"))
        .send()
        .await
        .expect("POST /ops");
    assert_eq!(post.status(), 405);
    server.abort();
}

/// `EveryColumn`'s tables (with its history table), and rows `1..=n`, all
/// pending.
async fn every_column<DB: TestBackend>(db: &Db<DB>, n: i64)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql(crate::tables::golden::<DB>())
        .execute(&mut *conn)
        .await
        .expect("EveryColumn's tables");
    let insert = match DB::DIALECT {
        Dialect::Postgres => "INSERT INTO sg_table_payouts (id) VALUES ($1)",
        _ => "INSERT INTO sg_table_payouts (id) VALUES (?)",
    };
    for id in 1..=n {
        db.execute(insert, &[Bind::Int(id)]).await.expect("insert");
    }
}

/// The console served on a free port; its address and the server's task.
async fn serve(router: axum::Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(listener, router).await.expect("serve");
    });
    (address, server)
}

/// The console at `/ops`, with the service's authentication naming
/// alice the operator, served on a free port.
async fn serve_as_alice<DB: TestBackend>(
    console: Console<DB>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let router = console
        .router()
        .layer(axum::Extension(Operator::new("alice")));
    serve(axum::Router::new().nest("/ops", router)).await
}

/// A GET's status and body.
async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// The keys a state page lists, in order.
fn listed(page: &str) -> Vec<i64> {
    page.split("<tr data-key=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().expect("a key"))
        .collect()
}

/// The status of row `id` of `EveryColumn`'s table, as SQL reads it.
async fn status_of<DB: TestBackend>(db: &Db<DB>, id: i64) -> Option<String> {
    let read = match DB::DIALECT {
        Dialect::Postgres => "SELECT status FROM sg_table_payouts WHERE id = $1",
        _ => "SELECT status FROM sg_table_payouts WHERE id = ?",
    };
    match db.fetch_one::<(String,)>(read, &[Bind::Int(id)]).await {
        Ok((status,)) => Some(status),
        Err(sqlx::Error::RowNotFound) => None,
        Err(error) => panic!("read status: {error}"),
    }
}

/// The ids in `status`, in key order, as SQL finds them.
async fn ids_in<DB: TestBackend>(db: &Db<DB>, status: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    for id in 1..=57_i64 {
        if status_of(db, id).await.as_deref() == Some(status) {
            ids.push(id);
        }
    }
    ids
}

async fn the_pages_show_what_the_tables_hold<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    i64: Key<DB> + ConsoleKey<EveryColumn, DB>,
    EveryColumn: FollowUpValues<DB>,
{
    every_column(&db, 57).await;
    let started = EveryColumn::start().apply(&db.pool, 9_i64).await.unwrap();
    assert!(started.is_applied());
    // A note, and a retry's reason, that try to be markup.
    let hostile = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    // Row 3's effect asks to be tried again in a minute, with a reason,
    // row 30's at once: recovery may take row 30 over now, and row 3 waits.
    for (id, wait) in [(3_i64, 60), (30, 0)] {
        let won = EveryColumn::start()
            .apply(&db.pool, id)
            .await
            .unwrap()
            .won()
            .expect("a win");
        let later = won
            .finish(&db.pool, move |_: Effect<EveryColumn, i64>| async move {
                let retry = Retry::after(std::time::Duration::from_secs(wait));
                match id {
                    3 => retry.because(hostile).into(),
                    _ => retry.into(),
                }
            })
            .await
            .unwrap();
        assert_eq!(later, Finished::RetryLater);
    }
    // Row 12 ends in `failed` after its third and last attempt: it gave
    // up, where row 9 failed on its first.
    let started = EveryColumn::start().apply(&db.pool, 12_i64).await.unwrap();
    assert!(started.is_applied());
    let last_attempt = match DB::DIALECT {
        Dialect::Postgres => "UPDATE sg_table_payouts SET attempts = 3 WHERE id = $1",
        _ => "UPDATE sg_table_payouts SET attempts = 3 WHERE id = ?",
    };
    db.execute(last_attempt, &[Bind::Int(12)]).await.unwrap();
    let gave_up = EveryColumn::fail().apply(&db.pool, 12_i64).await.unwrap();
    assert!(gave_up.is_applied());
    let failed = EveryColumn::fail()
        .noted(Note::by(hostile).because(hostile))
        .apply(&db.pool, 9_i64)
        .await
        .unwrap();
    assert!(failed.is_applied());

    let router = axum::Router::new().nest(
        "/ops",
        Console::new(db.pool.clone())
            .machine::<EveryColumn, i64>()
            .router(),
    );
    let (address, server) = serve(router).await;
    let base = format!("http://{address}/ops/EveryColumn");

    // The overview: of the in-flight state, the row due for recovery and
    // the row waiting for its retry, as `Machine::counts` reads them.
    let (status, overview) = get(&format!("http://{address}/ops")).await;
    assert_eq!(status, 200, "{overview}");
    assert!(overview.contains("data-due=\"1\""), "{overview}");
    assert!(overview.contains("data-waiting=\"1\""), "{overview}");
    assert!(overview.contains("data-gave-up=\"1\""), "{overview}");
    let counts = EveryColumn::MACHINE.counts(&db.pool).await.unwrap();
    let sending = counts
        .iter()
        .find(|c| c.state == EveryColumn::Sending)
        .expect("sending");
    assert_eq!(
        (sending.rows, sending.due, sending.waiting, sending.gave_up),
        (2, Some(1), Some(1), Some(1))
    );
    let pending = counts
        .iter()
        .find(|c| c.state == EveryColumn::Pending)
        .expect("pending");
    assert_eq!(
        (pending.due, pending.waiting, pending.gave_up),
        (None, None, None)
    );

    // The pending rows, 50 to a page, in key order, as SQL finds them.
    let (status, first) = get(&format!("{base}/states/pending")).await;
    assert_eq!(status, 200, "{first}");
    let pending = ids_in(&db, "pending").await;
    assert_eq!(pending.len(), 53);
    assert_eq!(listed(&first), pending[..50], "{first}");
    let next = first
        .split("class=\"next\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to the next page");
    assert!(
        next.starts_with("/ops/EveryColumn/states/pending?after="),
        "{next}"
    );
    let (_, second) = get(&format!("http://{address}{}", next.replace("&amp;", "&"))).await;
    assert_eq!(listed(&second), pending[50..], "{second}");
    assert!(
        !second.contains("class=\"next\""),
        "the last page has no next"
    );
    // An in-flight row's age is its stamp's; a state no row is in is empty.
    let (_, sending) = get(&format!("{base}/states/sending")).await;
    assert_eq!(listed(&sending), [3, 30]);
    // Each in-flight row's attempts and last error: row 3's escaped.
    assert!(
        sending.contains("<td class=\"last-error\">&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{sending}"
    );
    assert_eq!(
        sending
            .matches("<td class=\"rows attempts\">1</td>")
            .count(),
        2,
        "{sending}"
    );
    assert!(!sending.contains("<script>"), "{sending}");
    let page = EveryColumn::MACHINE
        .rows(&db.pool, EveryColumn::Sending, None)
        .await
        .unwrap();
    let listed_rows: Vec<_> = (page.rows.iter())
        .map(|row| (row.key, row.attempts, row.last_error.as_deref()))
        .collect();
    assert_eq!(
        listed_rows,
        [(3, Some(1), Some(hostile)), (30, Some(1), None)]
    );
    // A state that counts no attempts has neither column.
    let (_, pending_page) = get(&format!("{base}/states/pending")).await;
    assert!(!pending_page.contains("attempts"), "{pending_page}");
    assert!(
        !sending.contains("unknown"),
        "the stamp gives the age: {sending}"
    );
    // A state without a stamp of its own takes the history's last move in.
    let (_, failed_page) = get(&format!("{base}/states/failed")).await;
    assert_eq!(listed(&failed_page), [9, 12]);
    assert!(
        !failed_page.contains("unknown"),
        "the history gives the age: {failed_page}"
    );
    // Pending rows have neither.
    assert!(first.contains("unknown"), "{first}");
    let (_, sent) = get(&format!("{base}/states/sent")).await;
    assert!(sent.contains("No rows."), "{sent}");

    // A row: its state, occurrence, effect key, choices and history.
    let (status, row) = get(&format!("{base}/rows/3")).await;
    assert_eq!(status, 200, "{row}");
    assert!(row.contains("data-state=\"sending\""), "{row}");
    assert!(row.contains("<dd class=\"occurrence\">1</dd>"), "{row}");
    let won_key = "sg_table_payouts.status:3:sending:1";
    assert!(row.contains(won_key), "the effect key: {row}");
    assert!(row.contains("data-transition=\"fail\""), "{row}");
    // Its attempts, and its next attempt, asked for in a minute.
    assert!(row.contains("data-attempts=\"1\">1 of at most 3"), "{row}");
    assert!(row.contains("<dd class=\"next-attempt\">in "), "{row}");
    // Its last error, escaped; row 30's retry gave none.
    assert!(
        row.contains("<dd class=\"last-error\">&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{row}"
    );
    assert!(!row.contains("<script>") && !row.contains("<img"), "{row}");
    let (_, due) = get(&format!("{base}/rows/30")).await;
    assert!(due.contains("<dd class=\"next-attempt\">due now"), "{due}");
    assert!(!due.contains("last error"), "{due}");
    // As `Machine::available` reads them.
    let waiting = EveryColumn::MACHINE
        .available(&db.pool, 3_i64)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiting.attempts(), Some(1));
    assert_eq!(waiting.last_error(), Some(hostile));
    let next = waiting.next_attempt_in().expect("a next attempt");
    assert!(next > std::time::Duration::from_secs(50), "{next:?}");
    let overdue = EveryColumn::MACHINE
        .available(&db.pool, 30_i64)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(overdue.next_attempt_in(), Some(std::time::Duration::ZERO));
    assert_eq!(overdue.last_error(), None);
    let pending = EveryColumn::MACHINE
        .available(&db.pool, 1_i64)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (pending.attempts(), pending.next_attempt_in()),
        (None, None)
    );
    assert!(
        row.contains("takes values the console cannot supply"),
        "confirm binds: {row}"
    );
    assert!(!row.contains("<form"), "actions are off: {row}");
    assert!(row.contains("<a href=\"/ops\">Overview</a>"), "{row}");
    // The hostile note is text: escaped, never markup.
    let (_, noted) = get(&format!("{base}/rows/9")).await;
    assert!(
        noted.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{noted}"
    );
    assert!(!noted.contains("<script>"), "{noted}");
    assert!(!noted.contains("<img"), "{noted}");

    // A key that is not one, a row that is not there, a state and a
    // machine that do not exist: each says why, with its status.
    let (status, page) = get(&format!("{base}/rows/abc")).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("`abc` is not a key"), "{page}");
    let (status, page) = get(&format!("{base}/rows/999")).await;
    assert_eq!(status, 404, "{page}");
    let (status, page) = get(&format!("{base}/states/%3Cb%3E")).await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("no state `&lt;b&gt;`"), "{page}");
    let (status, _) = get(&format!("http://{address}/ops/Nothing/rows/1")).await;
    assert_eq!(status, 404);

    // Without actions, a POST made by hand is refused, and moves nothing.
    let post = reqwest::Client::new()
        .post(format!("{base}/rows/1"))
        .header("origin", format!("http://{address}"))
        .form(&[("transition", "start"), ("occurrence", "0")])
        .send()
        .await
        .expect("POST");
    assert_eq!(post.status(), 405);
    assert_eq!(status_of(&db, 1).await.as_deref(), Some("pending"));
    // Nor does a page say that a press moved the row, whatever its URL
    // says.
    let (status, row) = get(&format!("{base}/rows/1?moved=Sending")).await;
    assert_eq!(status, 200, "{row}");
    assert!(!row.contains("data-said=\""), "{row}");
    server.abort();

    // Mounted at the root, the links start there.
    let root: axum::Router = Console::new(db.pool.clone())
        .machine::<EveryColumn, i64>()
        .router();
    let (address, server) = serve(root).await;
    let (status, page) = get(&format!("http://{address}/")).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("href=\"/EveryColumn/states/pending\""),
        "{page}"
    );
    let (status, row) = get(&format!("http://{address}/EveryColumn/rows/1")).await;
    assert_eq!(status, 200, "{row}");
    assert!(row.contains("<a href=\"/\">Overview</a>"), "{row}");
    server.abort();
}

/// A press of `transition` on row `id` at `occurrence`, from `origin`,
/// with `token` (the cookie and the form's, or none).
async fn press(
    address: SocketAddr,
    id: i64,
    transition: &str,
    occurrence: i64,
    origin: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut request = no_redirect().post(format!("http://{address}/ops/EveryColumn/rows/{id}"));
    // An origin, or a browser's word that the page is of the same origin,
    // or neither.
    request = match origin {
        "" => request,
        "same-origin" => request.header("sec-fetch-site", "same-origin"),
        origin => request.header("origin", origin),
    };
    let mut form = vec![
        ("transition", transition.to_owned()),
        ("occurrence", occurrence.to_string()),
        ("reason", "customer asked".to_owned()),
    ];
    if let Some(token) = token {
        request = request.header("cookie", format!("stateguard_console={token}"));
        form.push(("token", token.to_owned()));
    }
    let response = request.form(&form).send().await.expect("POST");
    see_other(
        address,
        response,
        token,
        &format!("/ops/EveryColumn/rows/{id}?moved="),
    )
    .await
}

async fn a_press_moves_the_row_once_and_names_the_operator<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    i64: Key<DB> + ConsoleKey<EveryColumn, DB>,
{
    every_column(&db, 3).await;
    let console = Console::new(db.pool.clone())
        .machine::<EveryColumn, i64>()
        .actions();
    let (address, server) = serve_as_alice(console).await;
    let origin = format!("http://{address}");

    // The page hands out its token as a cookie, and a form per button.
    let response = reqwest::get(format!("{origin}/ops/EveryColumn/rows/1"))
        .await
        .expect("GET");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    assert!(cookie.contains("Path=/ops"), "{cookie}");
    let token = cookie
        .strip_prefix("stateguard_console=")
        .and_then(|rest| rest.split(';').next())
        .expect("the token")
        .to_owned();
    let page = response.text().await.unwrap();
    assert!(page.contains("<form method=\"post\""), "{page}");
    assert!(
        page.contains(&format!("name=\"token\" value=\"{token}\"")),
        "{page}"
    );

    // A press moves the row and redirects to its page, which shows it;
    // the history names alice.
    let (status, page) = press(address, 1, "start", 0, &origin, Some(&token)).await;
    assert_eq!(status, 303, "{page}");
    assert!(page.contains("data-said=\"moved\""), "{page}");
    assert!(page.contains("data-state=\"sending\""), "{page}");
    assert!(
        page.contains("<span class=\"actor\">alice</span>"),
        "{page}"
    );
    assert!(page.contains("customer asked"), "{page}");
    assert_eq!(status_of(&db, 1).await.as_deref(), Some("sending"));
    let history = EveryColumn::MACHINE.history(&db.pool, 1_i64).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].actor.as_deref(), Some("alice"));

    // The same press again, from the page it came from: the row moved on.
    let (status, page) = press(address, 1, "start", 0, &origin, Some(&token)).await;
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("data-said=\"stale\""), "{page}");
    assert_eq!(
        EveryColumn::MACHINE
            .history(&db.pool, 1_i64)
            .await
            .unwrap()
            .len(),
        1
    );

    // A row moved by someone else after the page was read: Stale, unchanged.
    let moved = EveryColumn::start().apply(&db.pool, 2_i64).await.unwrap();
    assert!(moved.is_applied());
    let (status, page) = press(address, 2, "start", 0, &origin, Some(&token)).await;
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("Stale"), "{page}");
    let (status, page) = press(address, 2, "fail", 0, &origin, Some(&token)).await;
    assert_eq!(
        status, 409,
        "a stale page cannot fail the row either: {page}"
    );
    assert_eq!(status_of(&db, 2).await.as_deref(), Some("sending"));

    // From another site, without the page's token, or with a value the
    // console cannot supply: refused, and row 3 stays pending.
    let (status, page) = press(address, 3, "start", 0, "http://evil.example", Some(&token)).await;
    assert_eq!(status, 403, "{page}");
    let (status, page) = press(address, 3, "start", 0, &origin, None).await;
    assert_eq!(status, 403, "{page}");
    let (status, page) = press(address, 3, "confirm", 0, &origin, Some(&token)).await;
    assert_eq!(status, 400, "{page}");
    assert_eq!(status_of(&db, 3).await.as_deref(), Some("pending"));

    // Without an operator, refused too.
    let anonymous = axum::Router::new().nest(
        "/ops",
        Console::new(db.pool.clone())
            .machine::<EveryColumn, i64>()
            .actions()
            .router(),
    );
    let (other, other_server) = serve(anonymous).await;
    let (status, page) = press(
        other,
        3,
        "start",
        0,
        &format!("http://{other}"),
        Some(&token),
    )
    .await;
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("no operator"), "{page}");
    assert_eq!(status_of(&db, 3).await.as_deref(), Some("pending"));
    other_server.abort();

    // Without an `Origin`: refused, unless the browser says the page is of
    // the same origin.
    let (status, page) = press(address, 3, "start", 0, "", Some(&token)).await;
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("names no origin"), "{page}");
    let (status, page) = press(address, 3, "start", 0, "same-origin", Some(&token)).await;
    assert_eq!(status, 303, "{page}");
    assert_eq!(status_of(&db, 3).await.as_deref(), Some("sending"));
    server.abort();

    // With the console's origin named, only that origin presses: not the
    // host the request was sent to (a name that resolves to it).
    let named = Console::new(db.pool.clone())
        .machine::<EveryColumn, i64>()
        .actions()
        .origin("https://ops.example.com");
    let (address, server) = serve_as_alice(named).await;
    let (status, page) = press(
        address,
        3,
        "fail",
        1,
        &format!("http://{address}"),
        Some(&token),
    )
    .await;
    assert_eq!(status, 403, "{page}");
    let (status, page) = press(
        address,
        3,
        "fail",
        1,
        "https://ops.example.com",
        Some(&token),
    )
    .await;
    assert_eq!(status, 303, "{page}");
    assert_eq!(status_of(&db, 3).await.as_deref(), Some("failed"));
    server.abort();

    // Row 3's history, oldest first; its latest move alone, bounded.
    let names = |rows: Vec<stateguard::HistoryRow<EveryColumn>>| {
        rows.iter()
            .map(|row| row.transition.name())
            .collect::<Vec<_>>()
    };
    let all = EveryColumn::MACHINE.history(&db.pool, 3_i64).await.unwrap();
    assert_eq!(names(all), ["start", "fail"]);
    let latest = EveryColumn::MACHINE
        .recent_history(&db.pool, 3_i64, 1)
        .await
        .unwrap();
    assert_eq!(names(latest), ["fail"]);
}

async fn an_operator_uses_the_console_in_chromium<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    i64: Key<DB> + ConsoleKey<EveryColumn, DB>,
{
    if let Some(why) = common::browser_missing() {
        assert!(
            !common::require_browser(),
            "{why}, but STATEGUARD_REQUIRE_BROWSER=1"
        );
        common::say(&format!("skipped `console_browser`: {why}"));
        return;
    }
    every_column(&db, 12).await;
    let hostile = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let noted = EveryColumn::start()
        .noted(Note::by(hostile).because(hostile))
        .apply(&db.pool, 9_i64)
        .await
        .unwrap();
    assert!(noted.is_applied());
    // What the overview must show, as SQL counts it now.
    let pending = ids_in(&db, "pending").await;
    let sending = ids_in(&db, "sending").await;

    let console = Console::new(db.pool.clone())
        .machine::<EveryColumn, i64>()
        .actions();
    let (address, server) = serve_as_alice(console).await;
    let dir = tempfile::tempdir().unwrap();
    let expect = dir.path().join("expect.json");
    let run = serde_json::json!([{
        "base": format!("http://{address}/ops"),
        "machine": "EveryColumn",
        "state": "pending",
        "hostile_row": 9,
        "press_row": 1,
        "stale_row": 2,
        "transition": "start",
    }]);
    std::fs::write(&expect, run.to_string()).unwrap();
    let output = tokio::process::Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tools/browser-check/console.mjs"
        ))
        .arg("--expect")
        .arg(&expect)
        .output()
        .await
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let seen: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    server.abort();

    // Nothing ran: no dialog, no console error, no page error; one page
    // answered with an error status, the stale press's 409.
    assert_eq!(seen["trouble"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["statuses"], serde_json::json!([409]), "{seen}");
    // The overview: the diagram drawn, the counts SQL finds.
    assert_eq!(seen["overview_status"], 200, "{seen}");
    assert!(
        seen["diagram"]["width"].as_f64().unwrap_or(0.0) > 50.0,
        "{seen}"
    );
    assert_eq!(seen["counts"]["pending"], pending.len(), "{seen}");
    assert_eq!(seen["counts"]["sending"], sending.len(), "{seen}");
    assert_eq!(seen["counts"]["sent"], 0, "{seen}");
    // The state's page, by its link: its rows, in key order.
    let listed: Vec<String> = pending.iter().map(i64::to_string).collect();
    assert_eq!(seen["state_rows"], serde_json::json!(listed), "{seen}");
    assert_eq!(
        seen["home_status"], 200,
        "the link back to the overview: {seen}"
    );
    // The hostile note is drawn as the text it is.
    assert_eq!(
        seen["hostile"]["actors"],
        serde_json::json!([hostile]),
        "{seen}"
    );
    assert_eq!(
        seen["hostile"]["reasons"],
        serde_json::json!([hostile]),
        "{seen}"
    );
    assert_eq!(seen["hostile"]["scripts"], 0, "{seen}");
    assert_eq!(seen["hostile"]["images"], 0, "{seen}");
    // The press moved the row, and the page after it says so.
    assert_eq!(seen["pressed"]["said"], "moved", "{seen}");
    assert_eq!(seen["pressed"]["state"], "sending", "{seen}");
    assert_eq!(
        seen["pressed"]["path"], "/ops/EveryColumn/rows/1?moved=Sending",
        "{seen}"
    );
    // Reloaded, the page reads the row again, and the history still holds
    // one move.
    assert_eq!(seen["reloaded"]["status"], 200, "{seen}");
    assert_eq!(seen["reloaded"]["said"], "moved", "{seen}");
    assert_eq!(
        seen["reloaded"]["actors"],
        serde_json::json!(["alice"]),
        "{seen}"
    );
    let history = EveryColumn::MACHINE.history(&db.pool, 1_i64).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        seen["pressed"]["actors"],
        serde_json::json!(["alice"]),
        "{seen}"
    );
    assert_eq!(
        seen["pressed"]["reasons"],
        serde_json::json!(["pressed in Chromium"]),
        "{seen}"
    );
    assert_eq!(status_of(&db, 1).await.as_deref(), Some("sending"));
    // Of two pages of one row, the first moved it; the second was stale,
    // and moved nothing: one move in the history.
    assert_eq!(seen["first"], "moved", "{seen}");
    assert_eq!(seen["stale"]["said"], "stale", "{seen}");
    assert_eq!(status_of(&db, 2).await.as_deref(), Some("sending"));
    let history = EveryColumn::MACHINE.history(&db.pool, 2_i64).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].actor.as_deref(), Some("alice"));
}

/// A client that hands back a redirect as it came.
fn no_redirect() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A POST of `form` to the overview, from `origin`, with `token` as the
/// cookie and in the form.
async fn post_overview(
    address: SocketAddr,
    origin: &str,
    token: Option<&str>,
    form: &[(&str, &str)],
) -> (u16, String) {
    let mut form: Vec<(&str, &str)> = form.to_vec();
    let mut request = no_redirect()
        .post(format!("http://{address}/ops"))
        .header("origin", origin);
    if let Some(token) = token {
        request = request.header("cookie", format!("stateguard_console={token}"));
        form.push(("token", token));
    }
    let response = request.form(&form).send().await.expect("POST");
    see_other(address, response, token, "/ops?requeued=").await
}

/// A POST's answer: its status and page, or for `303 See Other` (which
/// must lead to a path starting with `then`) the status and the page it
/// leads to, fetched as the browser would, with `token` as the cookie.
async fn see_other(
    address: SocketAddr,
    response: reqwest::Response,
    token: Option<&str>,
    then: &str,
) -> (u16, String) {
    let status = response.status().as_u16();
    if status != 303 {
        return (status, response.text().await.expect("body"));
    }
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(then), "{location}");
    let mut request = reqwest::Client::new().get(format!("http://{address}{location}"));
    if let Some(token) = token {
        request = request.header("cookie", format!("stateguard_console={token}"));
    }
    let page = request.send().await.expect("GET");
    assert_eq!(page.status(), 200);
    (status, page.text().await.expect("body"))
}

async fn dead_letters_are_listed_and_requeued<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB> + ConsoleKey<PayoutStatus, DB>,
{
    crate::outbox_table::table(&db).await;
    let enqueue = |id: &'static str| {
        let pool = db.pool.clone();
        async move {
            let mut tx = Tx::begin(&pool).await.unwrap();
            let message = Message {
                id,
                topic: "payout.sent",
                payload: b"{}",
            };
            outbox::enqueue(&mut tx, "1", message).await.unwrap();
            tx.commit(()).await.unwrap();
        }
    };
    // One message the relay gives up on at its first failure, one waiting.
    enqueue("payout:1:1").await;
    let relay = Relay::new(crate::outbox_table::Refuse).attempts(1);
    assert_eq!(relay.pass(&db.pool).await.unwrap().given_up(), 1);
    enqueue("payout:2:1").await;
    // Two idempotency keys begun, one of them completed: one running.
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in idempotency::ddl(DB::DIALECT) {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    drop(conn);
    for key in ["k1", "k2"] {
        let request = Request::new("console", key, "fingerprint").unwrap();
        let begun = idempotency::begin(&db.pool, &request, idempotency::DEFAULT_LEASE)
            .await
            .unwrap();
        let idempotency::Begun::New(ticket) = begun else {
            panic!("{key} is new");
        };
        if key == "k2" {
            let mut tx = Tx::begin(&db.pool).await.unwrap();
            ticket
                .complete(&mut tx, 200, b"done".to_vec())
                .await
                .unwrap();
            tx.commit(()).await.unwrap();
        }
    }
    assert_eq!(idempotency::running(&db.pool).await.unwrap(), 1);
    assert_eq!(outbox::backlog(&db.pool).await.unwrap(), 1);

    // Read-only: the dead letter is listed, with no button, and a POST is
    // refused.
    let reading = Console::new(db.pool.clone())
        .machine::<PayoutStatus, i64>()
        .stores(Stores::search_path());
    let (address, server) = serve(axum::Router::new().nest("/ops", reading.router())).await;
    let (status, page) = get(&format!("http://{address}/ops")).await;
    assert_eq!(status, 200, "{page}");
    let outbox_part = page
        .split("<section class=\"outbox\"")
        .nth(1)
        .expect("{page}");
    assert!(
        outbox_part.contains("data-message=\"payout:1:1\""),
        "{outbox_part}"
    );
    assert!(
        !outbox_part.contains("payout:2:1"),
        "a waiting message is no dead letter"
    );
    assert!(outbox_part.contains("the broker is down"), "{outbox_part}");
    let backlog = "<p class=\"backlog\"><strong data-count=\"1\">1</strong>";
    assert!(
        outbox_part.contains(backlog),
        "one message waits: {outbox_part}"
    );
    let running = "<p class=\"running\"><strong data-count=\"1\">1</strong>";
    assert!(page.contains(running), "one key runs: {page}");
    assert!(!outbox_part.contains("<form"), "{outbox_part}");
    let origin = format!("http://{address}");
    let (status, _) = post_overview(address, &origin, None, &[("requeue", "payout:1:1")]).await;
    assert_eq!(status, 405);
    server.abort();

    // With actions: a button; a press from elsewhere is refused; one from
    // the page requeues the message once.
    let acting = Console::new(db.pool.clone())
        .machine::<PayoutStatus, i64>()
        .stores(Stores::search_path())
        .actions();
    let (address, server) = serve_as_alice(acting).await;
    let origin = format!("http://{address}");
    let response = reqwest::get(format!("{origin}/ops")).await.expect("GET");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    let token = cookie
        .strip_prefix("stateguard_console=")
        .and_then(|rest| rest.split(';').next())
        .expect("the token")
        .to_owned();
    let page = response.text().await.unwrap();
    assert!(
        page.contains("name=\"requeue\" value=\"payout:1:1\""),
        "{page}"
    );
    assert!(
        page.contains("action=\"/ops\""),
        "the form posts to the overview: {page}"
    );
    let dead = || async {
        outbox::status(&db.pool, "payout:1:1")
            .await
            .unwrap()
            .unwrap()
    };
    let requeue = [("requeue", "payout:1:1")];
    let (status, _) = post_overview(address, "http://evil.example", Some(&token), &requeue).await;
    assert_eq!(status, 403);
    assert_eq!(dead().await.state(), MessageState::Dead);
    let (status, page) = post_overview(address, &origin, Some(&token), &requeue).await;
    assert_eq!(status, 303, "{page}");
    assert!(page.contains("data-said=\"requeued\""), "{page}");
    assert!(
        !page.contains("data-message=\"payout:1:1\""),
        "no longer dead: {page}"
    );
    let backlog = "<p class=\"backlog\"><strong data-count=\"2\">2</strong>";
    assert!(page.contains(backlog), "both messages wait: {page}");
    assert_eq!(
        (dead().await.state(), dead().await.attempts()),
        (MessageState::Waiting, 0)
    );
    let (status, page) = post_overview(address, &origin, Some(&token), &requeue).await;
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("data-said=\"not-dead\""), "{page}");
    server.abort();
}

/// G10: a press is the move, then a redirect to the row's page, which
/// reads the row. The read fails here (the fault matrix's hook refuses
/// the row's read), after the move committed: the page says the row
/// moved, and why it shows no more.
async fn a_press_whose_row_cannot_be_read_again_still_says_it_moved<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    i64: Key<DB> + ConsoleKey<EveryColumn, DB>,
{
    use stateguard_runtime::fault::{Fault, Plan};
    use tower::ServiceExt;

    every_column(&db, 1).await;
    let router: axum::Router = Console::new(db.pool.clone())
        .machine::<EveryColumn, i64>()
        .actions()
        .router()
        .layer(axum::Extension(Operator::new("alice")));
    let token = "ab".repeat(32);
    let request = axum::http::Request::post("/EveryColumn/rows/1")
        .header("host", "ops.example.com")
        .header("origin", "https://ops.example.com")
        .header("cookie", format!("stateguard_console={token}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(format!(
            "transition=start&occurrence=0&token={token}"
        )))
        .unwrap();
    let read = EveryColumn::MACHINE.available_sql();
    let read = match DB::DIALECT {
        Dialect::Postgres => read.postgres(),
        Dialect::Sqlite => read.sqlite(),
        _ => read.mysql(),
    };
    // The press redirects to the row's page, which says it moved.
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 303);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(location, "/EveryColumn/rows/1?moved=Sending");
    let request = axum::http::Request::get(location.as_str())
        .header("host", "ops.example.com")
        .header("cookie", format!("stateguard_console={token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let plan = Plan::fail_text(read, Fault::Refuse, std::time::Duration::ZERO);
    // The router in this task, so that the plan reaches its statements.
    let response = plan.run(router.oneshot(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let page = String::from_utf8(body.to_vec()).unwrap();
    assert!(page.contains("data-said=\"moved\""), "{page}");
    assert!(page.contains("The row could not be read again"), "{page}");
    assert!(
        plan.sent().contains(&read),
        "the read was sent, and refused"
    );
    // The move committed.
    assert_eq!(status_of(&db, 1).await.as_deref(), Some("sending"));
}
