//! An async HTTP/1.1 server (hyper) on an ember listener and a hyper client on the same
//! stack (the connection is fused): the example `hyper_server`, as a test.
#![cfg(feature = "tokio")]

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

async fn echo_len(
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let n: usize = path.trim_start_matches("/bytes/").parse().unwrap_or(0);
    let data: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let mut resp = Response::new(Full::new(Bytes::from(data)));
    resp.headers_mut()
        .insert("x-request-len", body.len().to_string().parse().unwrap());
    Ok(resp)
}

fn run(fusion: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let stack = Stack::builder()
        .squeues(2)
        .param("do_tcp_fusion", if fusion { "1" } else { "0" })
        .unwrap()
        .build()
        .unwrap();
    let st = stack.clone();
    rt.block_on(async move {
        let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8080);
        let listener = AsyncTcpListener::bind(&st, addr).unwrap();
        let server = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(s), service_fn(echo_len))
                        .await;
                });
            }
        });
        let c = AsyncTcpStream::connect(&st, addr).await.unwrap();
        assert_eq!(c.get_ref().is_fused().unwrap(), fusion);
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(c))
            .await
            .unwrap();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                eprintln!("client connection: {e:?}");
            }
        });
        for n in [0usize, 1, 1000, 300_000] {
            tx.ready().await.unwrap();
            let req = Request::post(format!("/bytes/{n}"))
                .header("host", "localhost")
                .body(Full::new(Bytes::from(vec![1u8; n / 3])))
                .unwrap();
            let resp = tx.send_request(req).await.unwrap();
            assert!(resp.status().is_success());
            assert_eq!(
                resp.headers()["x-request-len"],
                (n / 3).to_string().as_str()
            );
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body.len(), n);
            assert!(body
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i * 31 % 251) as u8));
        }
        server.abort();
    });
    let k = stack.kstat();
    let get = |n: &str| k.iter().find(|(x, _)| x == n).map_or(0, |(_, v)| *v);
    if fusion {
        assert!(get("fusion:tcp_fusion_bytes") > 300_000);
    } else {
        assert_eq!(get("fusion:tcp_fusion_bytes"), 0);
        assert!(get("classifier:loopback_segs") > 10);
    }
    stack.shutdown();
}

#[test]
fn hyper_serves_and_fetches_over_a_fused_connection() {
    run(true);
}

#[test]
fn hyper_serves_and_fetches_over_unfused_loopback() {
    run(false);
}
