//! Load generator for `scripts/bench_proxy.sh`: an MCP-like upstream over TLS, and a client that sends
//! allowed `tools/call` requests on keep-alive connections, either straight to the upstream or through
//! the proxy (CONNECT, then TLS with the proxy's session CA), and prints requests/s and latency
//! percentiles.
//!
//! ```text
//! bench_proxy upstream DIR                 # serve; writes DIR/upstream-ca.pem, prints "port N"
//! bench_proxy load PORT CA_PEM [PROXY] [--connections N] [--seconds S]
//! ```

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("upstream") => upstream(args.get(1).ok_or("upstream DIR")?).await,
        Some("load") => load(&args[1..]).await,
        _ => Err("usage: bench_proxy upstream DIR | load PORT CA_PEM [PROXY] [--connections N] [--seconds S]".into()),
    }
}

async fn upstream(dir: &str) -> Result<(), Error> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_key = KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    std::fs::write(format!("{dir}/upstream-ca.pem"), ca.pem())?;

    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse()?)];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("port {}", listener.local_addr()?.port());
    loop {
        let (stream, _) = listener.accept().await?;
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = service_fn(|req: Request<Incoming>| async move {
                let body = req
                    .into_body()
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let reply = serde_json::json!({
                    "jsonrpc": "2.0", "id": value["id"],
                    "result": {"content": [{"type": "text", "text": "ok"}], "isError": false}
                });
                let response = Response::builder()
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(reply.to_string())))
                    .unwrap();
                Ok::<_, Infallible>(response)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

struct LoadArgs {
    port: u16,
    roots: Vec<CertificateDer<'static>>,
    proxy: Option<SocketAddr>,
    connections: usize,
    seconds: u64,
}

fn parse_load(args: &[String]) -> Result<LoadArgs, Error> {
    let mut positional = Vec::new();
    let mut connections = 16;
    let mut seconds = 10;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--connections" => connections = it.next().ok_or("--connections N")?.parse()?,
            "--seconds" => seconds = it.next().ok_or("--seconds S")?.parse()?,
            _ => positional.push(arg.clone()),
        }
    }
    let port = positional.first().ok_or("PORT")?.parse()?;
    let pem = std::fs::read(positional.get(1).ok_or("CA_PEM")?)?;
    let roots = fenzi_proxy::tls::upstream::parse_pem_certs(&pem)?;
    let proxy = positional.get(2).map(|p| p.parse()).transpose()?;
    Ok(LoadArgs {
        port,
        roots,
        proxy,
        connections,
        seconds,
    })
}

async fn load(args: &[String]) -> Result<(), Error> {
    let args = Arc::new(parse_load(args)?);
    let mut store = RootCertStore::empty();
    for root in &args.roots {
        store.add(root.clone())?;
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);

    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut workers = Vec::new();
    for worker in 0..args.connections {
        let (args, config) = (args.clone(), config.clone());
        workers.push(tokio::spawn(async move {
            run_worker(worker, &args, config, deadline).await
        }));
    }
    let mut latencies: Vec<Duration> = Vec::new();
    let mut errors = 0usize;
    for w in workers {
        let (lat, errs) = w.await??;
        latencies.extend(lat);
        errors += errs;
    }
    latencies.sort();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1000.0
    };
    if latencies.is_empty() {
        return Err("no request completed".into());
    }
    println!(
        "{} requests in {}s over {} connections: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, errors {}",
        latencies.len(),
        args.seconds,
        args.connections,
        latencies.len() as f64 / args.seconds as f64,
        pct(0.50),
        pct(0.99),
        errors
    );
    Ok(())
}

async fn run_worker(
    worker: usize,
    args: &LoadArgs,
    config: Arc<ClientConfig>,
    deadline: Instant,
) -> Result<(Vec<Duration>, usize), Error> {
    let target = format!("127.0.0.1:{}", args.port);
    let stream = match args.proxy {
        None => TcpStream::connect(&target).await?,
        Some(proxy) => {
            let mut stream = TcpStream::connect(proxy).await?;
            stream
                .write_all(
                    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
                )
                .await?;
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).await?;
                head.push(byte[0]);
            }
            if !head.starts_with(b"HTTP/1.1 200") {
                return Err(format!("CONNECT refused: {}", String::from_utf8_lossy(&head)).into());
            }
            stream
        }
    };
    stream.set_nodelay(true)?;
    let name = ServerName::IpAddress("127.0.0.1".parse::<std::net::IpAddr>()?.into());
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut id = (worker as u64) << 32;
    while Instant::now() < deadline {
        id += 1;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}}}}}}"#
        );
        let req = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", &target)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(body)))?;
        let started = Instant::now();
        sender.ready().await?;
        let response = sender.send_request(req).await?;
        let ok = response.status() == 200;
        response.into_body().collect().await?;
        if ok {
            latencies.push(started.elapsed());
        } else {
            errors += 1;
        }
    }
    Ok((latencies, errors))
}
