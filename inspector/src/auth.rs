//! Who may use the inspector: the bearer token, and requests of its own origin only.
//!
//! Pure checks of a request's headers, unit-tested without a server.

use std::net::SocketAddr;

use axum::http::{HeaderMap, header};

/// The token and the address requests are checked against.
#[derive(Debug)]
pub(crate) struct Guard {
    token: String,
    /// The `Host` values the inspector answers to: its address, and `localhost` on its
    /// port for a loopback address.
    hosts: Vec<String>,
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token, or the wrong one: 401.
    Token,
    /// Another site's page, or a name that is not the inspector's (DNS rebinding): 403.
    Origin,
}

impl Guard {
    pub(crate) fn new(token: String, addr: SocketAddr) -> Self {
        let mut hosts = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            hosts.push(format!("localhost:{}", addr.port()));
        }
        Guard { token, hosts }
    }

    /// Checks a request's `Host` and `Origin`, and its token: `Authorization: Bearer`, or
    /// (`query_token`) the page's `?token=`.
    pub(crate) fn check(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
    ) -> Result<(), Refusal> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| self.hosts.iter().any(|ours| ours.eq_ignore_ascii_case(h))) {
            return Err(Refusal::Origin);
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let ours = host.map(|h| format!("http://{h}"));
            let same_origin = origin
                .to_str()
                .ok()
                .zip(ours.as_deref())
                .is_some_and(|(origin, ours)| origin.eq_ignore_ascii_case(ours));
            if !same_origin {
                return Err(Refusal::Origin);
            }
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "));
        match bearer.or(query_token) {
            Some(token) if same(token, &self.token) => Ok(()),
            _ => Err(Refusal::Token),
        }
    }
}

/// Whether `a` equals `b`, in time that depends on their lengths only.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether `token` can travel in a header and a query: printable ASCII, no space, no `&`,
/// `#` or `%`, not empty.
pub(crate) fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"&#%+".contains(&b))
}

/// A new token: 128 bits from the operating system, as hex.
pub(crate) fn new_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system gives random bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn guard() -> Guard {
        Guard::new("secret".into(), SocketAddr::from(([127, 0, 0, 1], 4000)))
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    /// A request needs the token, as a bearer header or the page's query.
    #[test]
    fn the_token_is_required() {
        let g = guard();
        let host = (header::HOST, "127.0.0.1:4000");
        assert_eq!(
            g.check(&headers(std::slice::from_ref(&host)), None),
            Err(Refusal::Token)
        );
        assert_eq!(
            g.check(&headers(std::slice::from_ref(&host)), Some("nope")),
            Err(Refusal::Token)
        );
        assert_eq!(
            g.check(&headers(std::slice::from_ref(&host)), Some("secret")),
            Ok(())
        );
        let bearer = (header::AUTHORIZATION, "Bearer secret");
        assert_eq!(g.check(&headers(&[host.clone(), bearer]), None), Ok(()));
        let wrong = (header::AUTHORIZATION, "Bearer secreT");
        assert_eq!(g.check(&headers(&[host, wrong]), None), Err(Refusal::Token));
    }

    /// Another origin, or a host name that is not the inspector's, is refused even with
    /// the token; the page's own origin and `localhost` are not.
    #[test]
    fn other_origins_and_hosts_are_refused() {
        let g = guard();
        let bearer = (header::AUTHORIZATION, "Bearer secret");
        let ok = [
            (header::HOST, "localhost:4000"),
            (header::ORIGIN, "http://localhost:4000"),
            bearer.clone(),
        ];
        assert_eq!(g.check(&headers(&ok), None), Ok(()));
        let foreign = [
            (header::HOST, "127.0.0.1:4000"),
            (header::ORIGIN, "http://evil.example"),
            bearer.clone(),
        ];
        assert_eq!(g.check(&headers(&foreign), None), Err(Refusal::Origin));
        let rebound = [(header::HOST, "evil.example:4000"), bearer];
        assert_eq!(g.check(&headers(&rebound), None), Err(Refusal::Origin));
    }

    /// Made tokens are 32 hex digits and differ; given ones must travel in a header.
    #[test]
    fn tokens_are_random_and_printable() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(valid_token(&a));
        assert!(!valid_token(""));
        assert!(!valid_token("with space"));
        assert!(!valid_token("a&b"));
    }
}
