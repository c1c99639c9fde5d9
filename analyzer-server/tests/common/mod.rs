//! Shared by the service's integration tests.

use hawkmesh_analyzer_server::RunningServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on the service's HTTP port over a plain TCP connection: the status code and
/// the body.
pub async fn http_get(server: &RunningServer, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(server.http_addr)
        .await
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: analyzer\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
