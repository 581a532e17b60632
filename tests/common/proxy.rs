//! A TCP proxy in front of a real server, which can stop passing the
//! server's answers on: the network of a deadline test. Requests still
//! reach the server (a `COMMIT` sent through a held proxy commits), and
//! the answers wait, unread, until [`Proxy::release`]; a connection made
//! while held never finishes its handshake.

use std::net::SocketAddr;
use std::sync::Arc;

use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Pool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A proxy on 127.0.0.1, forwarding to one upstream address. Dropping it
/// stops accepting; connections already made go on.
pub struct Proxy {
    addr: SocketAddr,
    held: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding every connection made to [`Proxy::addr`] to
    /// `host:port`.
    pub async fn start(host: &str, port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let upstream = format!("{host}:{port}");
        let (held, _) = watch::channel(false);
        let watched = held.subscribe();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(forward(client, server, watched.clone()));
            }
        });
        Proxy {
            addr,
            held,
            accepting,
        }
    }

    /// The address to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, no byte from the server reaches a client: the answer
    /// to whatever a client sends next is held back (a black hole, as a
    /// silent network looks to the client).
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Passes the held answers on, and every later one.
    pub fn release(&self) {
        self.held.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Client to server always; server to client only while not held. A chunk
/// read from the server is written on only once the proxy is not held, so
/// nothing read after [`Proxy::hold`] slips through.
async fn forward(client: TcpStream, server: TcpStream, mut held: watch::Receiver<bool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0_u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if held.wait_for(|held| !held).await.is_err() {
                break;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}

/// A backend whose server a [`Proxy`] can stand in front of.
pub trait Proxied: super::TestBackend {
    /// The host and port of the server `pool` connects to.
    fn upstream(pool: &Pool<Self>) -> (String, u16);

    /// `pool`'s connect options, pointed at `addr` instead.
    fn via(pool: &Pool<Self>, addr: SocketAddr) -> <Self::Connection as Connection>::Options;
}

impl Proxied for sqlx::Postgres {
    fn upstream(pool: &Pool<Self>) -> (String, u16) {
        let options: Arc<PgConnectOptions> = pool.connect_options();
        (options.get_host().to_owned(), options.get_port())
    }

    fn via(pool: &Pool<Self>, addr: SocketAddr) -> PgConnectOptions {
        (*pool.connect_options())
            .clone()
            .host(&addr.ip().to_string())
            .port(addr.port())
    }
}

impl Proxied for sqlx::MySql {
    fn upstream(pool: &Pool<Self>) -> (String, u16) {
        let options: Arc<MySqlConnectOptions> = pool.connect_options();
        (options.get_host().to_owned(), options.get_port())
    }

    fn via(pool: &Pool<Self>, addr: SocketAddr) -> MySqlConnectOptions {
        (*pool.connect_options())
            .clone()
            .host(&addr.ip().to_string())
            .port(addr.port())
    }
}

/// A proxy in front of `db`'s server, and a pool of one connection through
/// it, made before the test holds anything. The pool does not ping a
/// connection before handing it out, so that what a held proxy stops is
/// the test's own statement, and waits a minute for a connection, longer
/// than any deadline under test.
pub async fn proxied<DB: Proxied>(pool: &Pool<DB>) -> (Proxy, Pool<DB>) {
    let (host, port) = DB::upstream(pool);
    let proxy = Proxy::start(&host, port).await;
    let options = DB::via(pool, proxy.addr()).disable_statement_logging();
    let through = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(1)
        .test_before_acquire(false)
        .acquire_timeout(std::time::Duration::from_secs(60))
        .connect_with(options)
        .await
        .expect("a pool through the proxy");
    (proxy, through)
}
