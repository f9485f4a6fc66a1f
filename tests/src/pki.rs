//! Throw-away certificates for TLS tests: a CA, a server certificate for 127.0.0.1 and
//! localhost, and client certificates, written as PEM files into a temp directory.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use std::path::{Path, PathBuf};

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

pub struct Pem {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca { pem: cert.pem(), issuer: Issuer::new(params, key) }
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, &self.pem).expect("write CA");
        path
    }

    /// A certificate with this CN (and the given SANs), signed by this CA.
    pub fn issue(&self, dir: &Path, common_name: &str, sans: &[&str]) -> Pem {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let pem = Pem { cert: dir.join(format!("{common_name}.crt")), key: dir.join(format!("{common_name}.key")) };
        std::fs::write(&pem.cert, cert.pem()).expect("write cert");
        std::fs::write(&pem.key, key.serialize_pem()).expect("write key");
        pem
    }
}
