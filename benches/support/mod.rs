//! What the benches share: a small pool on SQLite and on each server, in a schema
//! (PostgreSQL) or a database (MySQL) of the bench's own, made anew by
//! fixed statements and dropped at the end, reached directly or over a
//! link that delays every packet (`Place::delay`), where round trips show.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

/// A bench's own schema or database: its name, the statements that make it
/// anew, the one that drops it, and how many connections its pool has.
pub struct Place {
    pub name: &'static str,
    pub fresh: [&'static str; 2],
    pub drop: &'static str,
    pub connections: u32,
    /// Each way's delay of the link to the server; zero connects directly.
    pub delay: Duration,
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median of the per-round ratios of `ours` to `theirs`: the paired
/// ratio, which the machine's drift between rounds moves less than the
/// ratio of the medians.
pub fn paired(ours: &[f64], theirs: &[f64]) -> f64 {
    median(ours.iter().zip(theirs).map(|(a, b)| a / b).collect())
}

/// The rates of `rounds` rounds of `a` and of `b`, which goes first
/// alternating (ABBA…), so that the machine's drift falls on both alike.
pub async fn alternating<A, B, FA, FB>(rounds: usize, a: A, b: B) -> (Vec<f64>, Vec<f64>)
where
    A: Fn() -> FA,
    B: Fn() -> FB,
    FA: Future<Output = f64>,
    FB: Future<Output = f64>,
{
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            xs.push(a().await);
            ys.push(b().await);
        } else {
            ys.push(b().await);
            xs.push(a().await);
        }
    }
    (xs, ys)
}

/// Runs `bench` on a pool of `connections` on a SQLite file (WAL,
/// `synchronous = NORMAL`) in a temporary directory, removed afterwards.
pub async fn on_sqlite<F, Fut>(connections: u32, bench: F)
where
    F: FnOnce(sqlx::SqlitePool) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("bench.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(connections)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    bench(pool.clone()).await;
    pool.close().await;
}

/// A local port that forwards to `host:port`, delaying the bytes of each
/// direction by `delay` (in order, without holding back what follows):
/// a network whose round trip takes twice `delay` more. Tokio's timer
/// counts whole milliseconds.
async fn link(host: &str, port: u16, delay: Duration) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap().port();
    let upstream = format!("{host}:{port}");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            client.set_nodelay(true).unwrap();
            server.set_nodelay(true).unwrap();
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(one_way(client_read, server_write, delay));
            tokio::spawn(one_way(server_read, client_write, delay));
        }
    });
    local
}

/// Copies `from` to `to`, each chunk `delay` after it arrived.
async fn one_way(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (sender, mut chunks) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((arrived, bytes)) = chunks.recv().await {
            tokio::time::sleep_until(arrived + delay).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buffer = vec![0; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buffer).await {
        if sender.send((Instant::now(), buffer[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(sender);
    let _ = writer.await;
}

/// Runs `bench` on a pool of `place.connections` in `place` on the server of
/// `STATEGUARD_POSTGRES_URL`, or says why it is skipped.
pub async fn on_postgres<F, Fut>(place: Place, bench: F)
where
    F: FnOnce(sqlx::PgPool) -> Fut,
    Fut: Future<Output = ()>,
{
    let Ok(url) = std::env::var("STATEGUARD_POSTGRES_URL") else {
        println!("PostgreSQL: skipped, because STATEGUARD_POSTGRES_URL is not set");
        return;
    };
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    for statement in place.fresh {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    let mut options = sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", place.name)]);
    if !place.delay.is_zero() {
        let port = link(options.get_host(), options.get_port(), place.delay).await;
        options = options.host("127.0.0.1").port(port);
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(place.connections)
        .min_connections(place.connections)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    bench(pool.clone()).await;
    pool.close().await;
    sqlx::query(place.drop).execute(&admin).await.unwrap();
}

/// Runs `bench` on a pool of `place.connections` in `place` on the server of
/// `STATEGUARD_MYSQL_URL`, or says why it is skipped.
pub async fn on_mysql<F, Fut>(place: Place, bench: F)
where
    F: FnOnce(sqlx::MySqlPool) -> Fut,
    Fut: Future<Output = ()>,
{
    let Ok(url) = std::env::var("STATEGUARD_MYSQL_URL") else {
        println!("MySQL: skipped, because STATEGUARD_MYSQL_URL is not set");
        return;
    };
    let admin = sqlx::MySqlPool::connect(&url).await.unwrap();
    for statement in place.fresh {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    let mut options = sqlx::mysql::MySqlConnectOptions::from_str(&url)
        .unwrap()
        .database(place.name);
    if !place.delay.is_zero() {
        let port = link(options.get_host(), options.get_port(), place.delay).await;
        options = options.host("127.0.0.1").port(port);
    }
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(place.connections)
        .min_connections(place.connections)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    bench(pool.clone()).await;
    pool.close().await;
    sqlx::query(place.drop).execute(&admin).await.unwrap();
}
