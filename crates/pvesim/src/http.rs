//! Responses as pveproxy writes them (headers, reason phrases, error bodies) and bounded
//! body reads; the API server and the admin API both answer through these.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::call::{ApiError, Reply};

/// Non-upload request bodies above this are refused (pve-http-server).
pub const MAX_BODY: usize = 512 * 1024;

pub type HttpResponse = Response<Full<Bytes>>;

pub fn json_response(status: u16, reason: Option<&str>, body: &Value) -> HttpResponse {
    bytes_response(
        status,
        reason,
        "application/json;charset=UTF-8",
        Bytes::from(body.to_string()),
    )
}

fn bytes_response(
    status: u16,
    reason: Option<&str>,
    content_type: &str,
    body: Bytes,
) -> HttpResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(reason) = reason
        && let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(reason.as_bytes().to_vec())
    {
        response.extensions_mut().insert(phrase);
    }
    let headers = response.headers_mut();
    headers.insert("server", HeaderValue::from_static("pve-api-daemon/3.0"));
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(CONTENT_TYPE, value);
    }
    headers.insert("cache-control", HeaderValue::from_static("max-age=0"));
    headers.insert("pragma", HeaderValue::from_static("no-cache"));
    response
}

pub fn plain_error(status: u16, message: &str) -> HttpResponse {
    let reason = message.lines().next().unwrap_or_default().to_string();
    bytes_response(
        status,
        Some(&reason),
        "text/plain;charset=UTF-8",
        Bytes::from(message.to_string()),
    )
}

pub fn error_response(error: &ApiError) -> HttpResponse {
    let reason = error.message.lines().next().unwrap_or_default().to_string();
    if error.empty_body {
        return bytes_response(
            error.status,
            Some(&reason),
            "text/plain;charset=UTF-8",
            Bytes::new(),
        );
    }
    let mut body = json!({ "data": null, "message": error.message });
    if let Some(errors) = &error.errors {
        body["errors"] = json!(errors);
    }
    json_response(error.status, Some(&reason), &body)
}

pub fn reply_response(reply: &Reply) -> HttpResponse {
    let mut body = json!({ "data": reply.data });
    if let Some(total) = reply.total {
        body["total"] = json!(total);
    }
    json_response(200, Some("OK"), &body)
}

/// Reads a full request body (admin PUTs).
pub async fn read_body(req: Request<Incoming>) -> Result<Bytes, HttpResponse> {
    Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|_| plain_error(413, "body too large"))
}

/// A percent-encoded path segment of the admin API (`+` stays a plus).
pub fn url_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("v={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}
