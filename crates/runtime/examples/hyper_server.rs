//! An async HTTP/1.1 server (hyper) serving on an ember listener, and a hyper client on
//! the same ember stack fetching from it: the connection between them is fused (TCP
//! Fusion), so the request and response move without a single segment.
//!
//! Run: `cargo run --release -p ember-runtime --features tokio --example hyper_server`

use ember_runtime::socket::{AsyncTcpListener, AsyncTcpStream};
use ember_runtime::Stack;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddrV4};

async fn hello(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = format!("hello from ember: {} {}\n", req.method(), req.uri().path());
    Ok(Response::new(Full::new(Bytes::from(body))))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stack = Stack::loopback(2)?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8080);
    let listener = AsyncTcpListener::bind(&stack, addr)?;
    println!("ember: hyper serving on {addr} (in-process stack)");

    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _peer)) = listener.accept().await else {
                break;
            };
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(hello))
                    .await;
            });
        }
    });

    let client_stream = AsyncTcpStream::connect(&stack, addr).await?;
    let fused = client_stream.get_ref().is_fused()?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(client_stream)).await?;
    tokio::spawn(conn);
    for path in ["/", "/fusion", "/squeue"] {
        sender.ready().await?;
        let req = Request::get(path)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        print!("GET {path} -> {status}: {}", String::from_utf8_lossy(&body));
        assert!(status.is_success());
        assert!(body.starts_with(b"hello from ember: GET"));
    }
    let k = stack.kstat();
    let get = |n: &str| k.iter().find(|(x, _)| x == n).map_or(0, |(_, v)| *v);
    println!(
        "fused: {fused}; fused deliveries: {}; fused bytes: {}; loopback segments: {}",
        get("fusion:tcp_fusion_putnext"),
        get("fusion:tcp_fusion_bytes"),
        get("classifier:loopback_segs")
    );
    server.abort();
    stack.shutdown();
    Ok(())
}
