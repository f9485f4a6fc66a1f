//! Issue 7: TCP needs TLS. A client's identity is its verified certificate (mutual TLS)
//! or a bearer token whose SHA-256 is in the config; a wrong or missing certificate is
//! refused at the handshake.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::TlsOptions;
use npud_tests::pki::Ca;
use npud_tests::{Client, Daemon, SessionOptions, StreamOptions, Target, bin, free_port};
use std::path::Path;
use std::process::Command;

const TOKEN: &str = "s3cret-token-of-bob";

fn sha256_hex(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    out.stdin.as_ref().unwrap().write_all(s.as_bytes()).unwrap();
    String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

struct Setup {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    url: String,
    tls: TlsOptions,
    alice: (std::path::PathBuf, std::path::PathBuf),
    ca: std::path::PathBuf,
}

fn start(client_auth: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("npud test CA");
    let ca_path = ca.write(dir.path(), "ca");
    let server = ca.issue(dir.path(), "npud-server", &["localhost", "127.0.0.1"]);
    let alice = ca.issue(dir.path(), "alice", &["alice.example"]);
    let port = free_port();
    let config = format!(
        "tls_client_auth = \"{client_auth}\"\n[[tenants]]\nname = \"team-alice\"\ncert_names = [\"alice.example\"]\n[[tenants]]\nname = \"team-bob\"\ntoken_sha256 = [\"{}\"]\n",
        sha256_hex(TOKEN)
    );
    let daemon = Daemon::builder()
        .config(&config)
        .args(&["--listen", &format!("127.0.0.1:{port}")])
        .args(&["--tls-cert", server.cert.to_str().unwrap(), "--tls-key", server.key.to_str().unwrap()])
        .args(&["--client-ca", ca_path.to_str().unwrap()])
        .start();
    let tls = TlsOptions { ca_pem: Some(ca.pem.into_bytes()), ..Default::default() };
    Setup {
        daemon,
        url: format!("https://127.0.0.1:{port}"),
        tls,
        alice: (alice.cert, alice.key),
        ca: ca_path,
        _dir: dir,
    }
}

fn with_cert(tls: &TlsOptions, cert: &Path, key: &Path) -> TlsOptions {
    TlsOptions {
        cert_pem: Some(std::fs::read(cert).unwrap()),
        key_pem: Some(std::fs::read(key).unwrap()),
        ..tls.clone()
    }
}

async fn connect(url: &str, tls: TlsOptions, token: Option<&str>) -> Result<Client, npud_tests::Error> {
    let options = SessionOptions { token: token.map(str::to_string), ..Default::default() };
    Client::connect_with(Target::Tls { url: url.to_string(), tls }, options).await
}

#[tokio::test]
async fn mutual_tls_identifies_the_client_by_its_certificate() {
    let s = start("required");
    let alice = connect(&s.url, with_cert(&s.tls, &s.alice.0, &s.alice.1), None).await.expect("alice connects");
    assert_eq!(alice.tenant(), "team-alice");
    let stream = alice.device(0).create_stream(StreamOptions::default()).await.unwrap();
    assert!(stream.is_done().await.unwrap());
    // Her streams are hers: the host's root does not see them.
    let local = s.daemon.npuctl_json(&["stream", "list"]);
    assert!(local.as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_or_wrong_client_certificate_is_refused() {
    let s = start("required");
    assert!(connect(&s.url, s.tls.clone(), None).await.is_err(), "no client certificate");
    let rogue_dir = tempfile::tempdir().unwrap();
    let rogue = Ca::new("someone else's CA").issue(rogue_dir.path(), "alice", &["alice.example"]);
    assert!(
        connect(&s.url, with_cert(&s.tls, &rogue.cert, &rogue.key), None).await.is_err(),
        "certificate from another CA"
    );
    // Plain TCP to the TLS port gets nowhere either.
    let plain = Client::connect(Target::Endpoint(s.url.replace("https://", "http://"))).await;
    assert!(plain.is_err());
    assert!(s.daemon.device0()["in_use"] == 0, "the daemon is unharmed");
}

#[tokio::test]
async fn bearer_tokens_identify_clients_when_certificates_are_optional() {
    let s = start("optional");
    let bob = connect(&s.url, s.tls.clone(), Some(TOKEN)).await.expect("bob connects with his token");
    assert_eq!(bob.tenant(), "team-bob");
    let e = connect(&s.url, s.tls.clone(), Some("guessed")).await.unwrap_err();
    assert_eq!(e.code(), Some(tonic::Code::Unauthenticated), "{e}");
    let e = connect(&s.url, s.tls.clone(), None).await.unwrap_err();
    assert_eq!(e.code(), Some(tonic::Code::Unauthenticated), "{e}");
    let alice = connect(&s.url, with_cert(&s.tls, &s.alice.0, &s.alice.1), None).await.unwrap();
    assert_eq!(alice.tenant(), "team-alice", "certificates still work");
}

#[test]
fn npuctl_speaks_tls() {
    let s = start("required");
    let base = ["--endpoint", &s.url, "--tls-ca", s.ca.to_str().unwrap()];
    let ok = Command::new(bin("npuctl"))
        .args(base)
        .args(["--tls-cert", s.alice.0.to_str().unwrap(), "--tls-key", s.alice.1.to_str().unwrap()])
        .args(["-o", "json", "stream", "create", "--count", "2"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let refused = Command::new(bin("npuctl")).args(base).args(["device", "list"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(8), "no client certificate: {}", String::from_utf8_lossy(&refused.stderr));
}

#[test]
fn tcp_without_tls_or_an_explicit_opt_in_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let out =
        Command::new(bin("npud")).arg("--socket").arg(&socket).args(["--listen", "127.0.0.1:1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"));
    let out = Command::new(bin("npud"))
        .arg("--socket")
        .arg(&socket)
        .args(["--listen", "127.0.0.1:1", "--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.crt"));
}
