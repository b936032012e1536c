//! `tracing` to stderr as hclog JSON lines, the format go-plugin parses.
//!
//! Terraform reads a plugin's stderr line by line; a JSON line with
//! `@level`, `@message`, `@timestamp` (exactly 6 fractional digits) and
//! `@module` is shown at its level, other keys as `key=value` pairs. Stdout
//! belongs to the handshake line alone, so nothing here ever writes to it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value as Json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

/// The level Terraform asks for, from (first set wins)
/// `TF_LOG_PROVIDER_<NAME>`, `TF_LOG_PROVIDER`, `TF_LOG`. Terraform filters
/// again on its side; this only avoids formatting lines nobody will see.
/// Unset means warnings and errors only.
pub fn level_from_env(provider_name: &str) -> LevelFilter {
    let specific = format!(
        "TF_LOG_PROVIDER_{}",
        provider_name.to_ascii_uppercase().replace('-', "_")
    );
    let value = [specific.as_str(), "TF_LOG_PROVIDER", "TF_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    match value {
        None => LevelFilter::WARN,
        Some(value) => parse_level(&value),
    }
}

/// Terraform's level names; `JSON` and anything unrecognised mean TRACE, as in Terraform.
pub fn parse_level(value: &str) -> LevelFilter {
    match value.trim().to_ascii_uppercase().as_str() {
        "OFF" => LevelFilter::OFF,
        "ERROR" => LevelFilter::ERROR,
        "WARN" => LevelFilter::WARN,
        "INFO" => LevelFilter::INFO,
        "DEBUG" => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// Installs the hclog layer as the global subscriber at `level`. Returns
/// false when a subscriber was already installed (e.g. by a test).
pub fn init(level: LevelFilter) -> bool {
    let subscriber = tracing_subscriber::registry()
        .with(HclogLayer::stderr())
        .with(filter_for(level));
    tracing::subscriber::set_global_default(subscriber).is_ok()
}

/// `level` for the provider's own events; transport crates (HTTP/2 frames,
/// TLS) only from WARN unless TRACE is asked for, so `TF_LOG=debug` shows
/// provider lines rather than protocol chatter.
pub fn filter_for(level: LevelFilter) -> Targets {
    let transport_level = if level == LevelFilter::TRACE {
        LevelFilter::TRACE
    } else {
        level.min(LevelFilter::WARN)
    };
    [
        "h2",
        "hyper",
        "hyper_util",
        "tonic",
        "tower",
        "rustls",
        "tokio_rustls",
        "mio",
    ]
    .into_iter()
    .fold(Targets::new().with_default(level), |targets, target| {
        targets.with_target(target, transport_level)
    })
}

/// Where formatted lines go.
type Sink = Box<dyn Fn(&[u8]) + Send + Sync>;

/// A `tracing` layer writing one hclog JSON object per event.
pub struct HclogLayer {
    sink: Sink,
}

impl std::fmt::Debug for HclogLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HclogLayer").finish_non_exhaustive()
    }
}

impl HclogLayer {
    /// Writes to the process's stderr.
    pub fn stderr() -> HclogLayer {
        HclogLayer::with_sink(|line| {
            // One write per line so concurrent lines do not interleave.
            let _ = std::io::stderr().lock().write_all(line);
        })
    }

    /// Writes each complete line (with its newline) to `sink`.
    pub fn with_sink(sink: impl Fn(&[u8]) + Send + Sync + 'static) -> HclogLayer {
        HclogLayer {
            sink: Box::new(sink),
        }
    }
}

/// Fields recorded on a span, merged into every event inside it.
struct SpanFields(Map<String, Json>);

struct JsonVisitor<'a> {
    fields: &'a mut Map<String, Json>,
    message: Option<&'a mut String>,
}

impl Visit for JsonVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message"
            && let Some(message) = self.message.as_deref_mut()
        {
            message.push_str(value);
            return;
        }
        self.fields
            .insert(field.name().to_owned(), Json::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message"
            && let Some(message) = self.message.as_deref_mut()
        {
            let _ = write!(message, "{value:?}");
            return;
        }
        self.fields
            .insert(field.name().to_owned(), Json::from(format!("{value:?}")));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields
            .insert(field.name().to_owned(), Json::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields
            .insert(field.name().to_owned(), Json::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields
            .insert(field.name().to_owned(), Json::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields
            .insert(field.name().to_owned(), Json::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.fields
            .insert(field.name().to_owned(), Json::from(value.to_string()));
    }
}

impl<S> Layer<S> for HclogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Map::new();
        attrs.record(&mut JsonVisitor {
            fields: &mut fields,
            message: None,
        });
        span.extensions_mut().insert(SpanFields(fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(SpanFields(fields)) = extensions.get_mut::<SpanFields>() {
            values.record(&mut JsonVisitor {
                fields,
                message: None,
            });
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Map::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(SpanFields(span_fields)) = span.extensions().get::<SpanFields>() {
                    fields.extend(span_fields.clone());
                }
            }
        }
        let mut message = String::new();
        event.record(&mut JsonVisitor {
            fields: &mut fields,
            message: Some(&mut message),
        });
        let metadata = event.metadata();
        let line = format_line(
            *metadata.level(),
            &message,
            metadata.target(),
            SystemTime::now(),
            fields,
        );
        (self.sink)(line.as_bytes());
    }
}

/// One hclog JSON line (with trailing newline).
pub(crate) fn format_line(
    level: Level,
    message: &str,
    target: &str,
    time: SystemTime,
    mut fields: Map<String, Json>,
) -> String {
    let level = match level {
        Level::TRACE => "trace",
        Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warn",
        Level::ERROR => "error",
    };
    fields.insert("@level".to_owned(), Json::from(level));
    fields.insert("@message".to_owned(), Json::from(message));
    fields.insert("@module".to_owned(), Json::from(module_name(target)));
    fields.insert("@timestamp".to_owned(), Json::from(timestamp(time)));
    let mut line = Json::Object(fields).to_string();
    line.push('\n');
    line
}

/// `provider.<target>` with `::` as dots, like the Go SDKs' sub-loggers.
fn module_name(target: &str) -> String {
    format!("provider.{}", target.replace("::", "."))
}

/// RFC 3339 UTC with exactly six fractional digits, which go-plugin requires.
pub(crate) fn timestamp(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        second_of_day / 3600,
        (second_of_day / 60) % 60,
        second_of_day % 60,
        since_epoch.subsec_micros()
    )
}

/// Days since 1970-01-01 to a Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[test]
    fn timestamps_have_six_fraction_digits() {
        let time = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(timestamp(time), "2023-11-14T22:13:20.123456Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(timestamp(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn levels_follow_terraforms_names() {
        assert_eq!(parse_level("debug"), LevelFilter::DEBUG);
        assert_eq!(parse_level("WARN"), LevelFilter::WARN);
        assert_eq!(parse_level("JSON"), LevelFilter::TRACE);
        assert_eq!(parse_level("off"), LevelFilter::OFF);
    }

    #[test]
    fn events_become_hclog_lines_with_span_fields() {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let subscriber = tracing_subscriber::registry()
            .with(HclogLayer::with_sink(move |line| {
                sink.lock()
                    .unwrap()
                    .push(String::from_utf8(line.to_vec()).unwrap());
            }))
            .with(LevelFilter::DEBUG);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("rpc", tf_rpc = "PlanResourceChange");
            let _entered = span.enter();
            tracing::debug!(target: "example::vm", vm_id = 101, "planned {}", "edge");
            tracing::trace!("filtered out");
        });
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with('\n'));
        let json: Json = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(json["@level"], "debug");
        assert_eq!(json["@message"], "planned edge");
        assert_eq!(json["@module"], "provider.example.vm");
        assert_eq!(json["vm_id"], 101);
        assert_eq!(json["tf_rpc"], "PlanResourceChange");
        let stamp = json["@timestamp"].as_str().unwrap();
        assert_eq!(stamp.len(), "2023-11-14T22:13:20.123456Z".len());
    }
}
