//! The floor under fenzi's intercepted path, for `scripts/bench`: the same two TLS hops with the same
//! libraries (tokio, hyper 1, rustls with ring) and nothing else. No policy, no parse, no audit, no
//! CONNECT: like the bench's nginx it terminates the client's TLS itself and re-encrypts to one
//! upstream over kept-alive, verified connections, with one current-thread runtime per thread and
//! each thread's own idle connections (as fenzi's shards). What separates fenzi from this is fenzi's
//! own work; what separates this from nginx is the stack.
//!
//! ```text
//! floor_proxy --cert CHAIN_PEM --key KEY_PEM --ca CA_PEM --upstream PORT [--threads N]
//! ```
//!
//! Prints `listening on 127.0.0.1:PORT` once it accepts.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::cell::RefCell;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

thread_local! {
    /// This thread's idle upstream connections.
    static IDLE: RefCell<Vec<SendRequest<Full<Bytes>>>> = const { RefCell::new(Vec::new()) };
}

struct Config {
    upstream_port: u16,
    connector: tokio_rustls::TlsConnector,
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| -> Option<String> {
        let at = args.iter().position(|a| a == name)?;
        args.get(at + 1).cloned()
    };
    let need = |name: &str| arg(name).ok_or_else(|| format!("{name} is required"));
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut std::io::BufReader::new(
        std::fs::File::open(need("--cert")?)?,
    ))
    .collect::<Result<_, _>>()?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut std::io::BufReader::new(
        std::fs::File::open(need("--key")?)?,
    ))?
    .ok_or("no private key in --key")?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls_pemfile::certs(&mut std::io::BufReader::new(std::fs::File::open(need(
        "--ca",
    )?)?)) {
        roots.add(ca?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let config = Arc::new(Config {
        upstream_port: need("--upstream")?.parse()?,
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
    });
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let threads: usize = arg("--threads").map_or(Ok(2), |n| n.parse())?;

    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    println!("listening on {}", listener.local_addr()?);
    let mut handles = Vec::new();
    for _ in 0..threads {
        // Every thread accepts on the same socket, each on its own runtime.
        let listener = listener.try_clone()?;
        let (acceptor, config) = (acceptor.clone(), config.clone());
        handles.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let (acceptor, config) = (acceptor.clone(), config.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = service_fn(move |req| forward(config.clone(), req));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            });
        }));
    }
    for handle in handles {
        let _ = handle.join();
    }
    Ok(())
}

/// Forwards one request whole and answers with the upstream's response, read whole.
async fn forward(
    config: Arc<Config>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match try_forward(&config, req).await {
        Ok(response) => response,
        Err(e) => {
            let mut response = Response::new(Full::new(Bytes::from(e.to_string())));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    })
}

async fn try_forward(
    config: &Config,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    // An idle connection the upstream has closed meanwhile is dropped, not used.
    let idle = IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        idle.retain(|s| !s.is_closed());
        idle.pop()
    });
    let mut sender = match idle {
        Some(sender) => sender,
        None => connect(config).await?,
    };
    let response = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    IDLE.with(|idle| idle.borrow_mut().push(sender));
    Ok(Response::from_parts(parts, Full::new(body)))
}

async fn connect(config: &Config) -> Result<SendRequest<Full<Bytes>>, Error> {
    let tcp = TcpStream::connect(("127.0.0.1", config.upstream_port)).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost")?;
    let tls = config.connector.connect(name, tcp).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    Ok(sender)
}
