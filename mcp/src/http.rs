//! The streamable-HTTP transport: rmcp's, over reqwest, with the server's headers.

use std::collections::BTreeMap;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// A transport to `url` sending `headers` with every request.
pub(crate) fn transport(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<
    StreamableHttpClientTransport<
        impl rmcp::transport::streamable_http_client::StreamableHttpClient,
    >,
    String,
> {
    // HTTPS needs a process-wide crypto provider; ring, as the model adapters install.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header name {name:?}: {e}"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("header {name}'s value: {e}"))?;
        custom.insert(name, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
    Ok(StreamableHttpClientTransport::from_config(config))
}
