//! What the benches share: a one-connection pool on each server, in a
//! schema (PostgreSQL) or a database (MySQL) of the bench's own, made anew
//! by fixed statements and dropped at the end.

use std::future::Future;
use std::str::FromStr;

/// A bench's own schema or database: its name, the statements that make it
/// anew, and the one that drops it.
pub struct Place {
    pub name: &'static str,
    pub fresh: [&'static str; 2],
    pub drop: &'static str,
}

/// Runs `bench` on a one-connection pool in `place` on the server of
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
    let options = sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", place.name)]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    bench(pool.clone()).await;
    pool.close().await;
    sqlx::query(place.drop).execute(&admin).await.unwrap();
}

/// Runs `bench` on a one-connection pool in `place` on the server of
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
    let options = sqlx::mysql::MySqlConnectOptions::from_str(&url)
        .unwrap()
        .database(place.name);
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    bench(pool.clone()).await;
    pool.close().await;
    sqlx::query(place.drop).execute(&admin).await.unwrap();
}
