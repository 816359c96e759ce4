//! Audit lines as OpenTelemetry log records, in the official `opentelemetry-proto` messages: one
//! `ExportLogsServiceRequest` per batch, with the resource attribute `service.name` = `fenzi` and
//! one `LogRecord` per line. A record's body is the line exactly as stored (so a receiver can
//! verify the hash chain), its attributes are `fenzi.session` (string) and `fenzi.seq` (int), its
//! time is the record's `ts`, and its severity follows the decision. Also the reading of the
//! receiver's answer (`ExportLogsServiceResponse`, whose `partial_success` may reject records).

use super::cursor::Fields;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

/// One audit line with the fields the export reads from it.
pub(crate) struct Shipped {
    pub line: String,
    pub fields: Fields,
}

/// The severity of a decision: a refusal is a warning, a failure an error, anything else
/// information.
pub(crate) fn severity(decision: &str) -> SeverityNumber {
    match decision {
        "denied" | "reload_refused" => SeverityNumber::Warn,
        "failed" => SeverityNumber::Error,
        _ => SeverityNumber::Info,
    }
}

fn string(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.to_string())),
    })
}

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The request for one batch, `observed_unix_nano` being when the exporter read it.
pub(crate) fn request(batch: &[Shipped], observed_unix_nano: u64) -> ExportLogsServiceRequest {
    let log_records = batch
        .iter()
        .map(|s| {
            let ms = fenzi_policy::audit::parse_timestamp(&s.fields.ts).unwrap_or(0);
            let severity = severity(&s.fields.decision);
            LogRecord {
                // A `ts` the writer did not write (it always does) is left unknown (0).
                time_unix_nano: u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000),
                observed_time_unix_nano: observed_unix_nano,
                severity_number: severity as i32,
                severity_text: s.fields.decision.clone(),
                body: string(&s.line),
                attributes: vec![
                    attribute(
                        "fenzi.session",
                        any_value::Value::StringValue(s.fields.session.clone()),
                    ),
                    attribute(
                        "fenzi.seq",
                        any_value::Value::IntValue(i64::try_from(s.fields.seq).unwrap_or(i64::MAX)),
                    ),
                ],
                ..Default::default()
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![attribute(
                    "service.name",
                    any_value::Value::StringValue("fenzi".into()),
                )],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "fenzi.audit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The protobuf bytes of the request for one batch.
pub(crate) fn encode(batch: &[Shipped], observed_unix_nano: u64) -> Vec<u8> {
    request(batch, observed_unix_nano).encode_to_vec()
}

/// What a 2xx answer says: how many records were rejected, and the receiver's message (a warning
/// when nothing was rejected). `None` when the body is not an `ExportLogsServiceResponse`: the
/// status still says the batch was accepted.
pub(crate) fn partial_success(body: &[u8]) -> Option<(u64, String)> {
    let response = ExportLogsServiceResponse::decode(body).ok()?;
    Some(match response.partial_success {
        Some(p) => (
            u64::try_from(p.rejected_log_records).unwrap_or(0),
            p.error_message,
        ),
        None => (0, String::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsPartialSuccess;

    fn shipped(seq: u64, decision: &str) -> Shipped {
        let line = format!(
            r#"{{"ts":"2026-12-03T10:00:00.250Z","seq":{seq},"session":"s1","decision":"{decision}","prev":"x"}}"#
        );
        let fields = serde_json::from_str(&line).unwrap();
        Shipped { line, fields }
    }

    #[test]
    fn a_batch_becomes_one_resource_with_one_record_per_line() {
        let batch = [
            shipped(7, "allowed"),
            shipped(8, "denied"),
            shipped(9, "failed"),
        ];
        let bytes = encode(&batch, 42);
        let back = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
        let rl = &back.resource_logs[0];
        let service = &rl.resource.as_ref().unwrap().attributes[0];
        assert_eq!(service.key, "service.name");
        assert_eq!(
            service.value.as_ref().unwrap().value,
            Some(any_value::Value::StringValue("fenzi".into()))
        );
        let records = &rl.scope_logs[0].log_records;
        assert_eq!(records.len(), 3);
        for (r, s) in records.iter().zip(&batch) {
            assert_eq!(r.body, string(&s.line));
            assert_eq!(r.attributes[0].key, "fenzi.session");
            assert_eq!(r.attributes[1].key, "fenzi.seq");
            assert_eq!(
                r.attributes[1].value.as_ref().unwrap().value,
                Some(any_value::Value::IntValue(s.fields.seq as i64))
            );
            assert_eq!(r.observed_time_unix_nano, 42);
            assert_eq!(r.severity_text, s.fields.decision);
        }
        let ts = fenzi_policy::audit::parse_timestamp("2026-12-03T10:00:00.250Z").unwrap();
        assert_eq!(records[0].time_unix_nano, ts as u64 * 1_000_000);
        let severities: Vec<i32> = records.iter().map(|r| r.severity_number).collect();
        assert_eq!(
            severities,
            [
                SeverityNumber::Info as i32,
                SeverityNumber::Warn as i32,
                SeverityNumber::Error as i32
            ]
        );
    }

    #[test]
    fn answers() {
        assert_eq!(partial_success(b""), Some((0, String::new())));
        let partial = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 2,
                error_message: "too big".into(),
            }),
        };
        assert_eq!(
            partial_success(&partial.encode_to_vec()),
            Some((2, "too big".into()))
        );
        assert_eq!(partial_success(b"\xff\xff\xff"), None);
    }
}
