//! The sandbox's DNS stub: a UDP server on the sandbox's loopback that answers every `A` question
//! with the name's synthetic address ([`crate::session::synthetic`]), whether or not the policy allows the name,
//! so that a refused name is a recorded `host_not_allowed` when the program connects, not a silent
//! resolution failure. Nothing is ever forwarded: DNS does not leave the machine.
//!
//! Answers, by question: `A` in class `IN`, the synthetic address (TTL 60 s); any other type, no
//! records (`NOERROR`, so a client asking for `AAAA` falls back to `A` at once); a name that is not
//! a host name fenzi accepts, `NXDOMAIN`; a full table, `REFUSED`; an opcode other than `QUERY`,
//! `NOTIMP`; a message that is not one well-formed question, `FORMERR` when its header can be read,
//! else nothing. Responses are never sent to. One question per query, as every resolver sends.

use crate::session::synthetic::SyntheticNames;
use fenzi_policy::host::Host;
use std::sync::Arc;
use tokio::net::UdpSocket;

const HEADER_LEN: usize = 12;
const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
const TTL_SECONDS: u32 = 60;
/// The largest query read: a question is at most 255 bytes of name and 4 of type and class, and
/// an EDNS record may follow.
const MAX_QUERY: usize = 1232;

const NOERROR: u8 = 0;
const FORMERR: u8 = 1;
const NXDOMAIN: u8 = 3;
const NOTIMP: u8 = 4;
const REFUSED: u8 = 5;

/// Serves queries on `socket` until the task is dropped.
pub async fn serve(socket: UdpSocket, names: Arc<SyntheticNames>) {
    let mut buf = [0u8; MAX_QUERY];
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(e) => {
                tracing::debug!("dns stub: receive failed: {e}");
                continue;
            }
        };
        if let Some(response) = answer(&buf[..n], &names)
            && let Err(e) = socket.send_to(&response, peer).await
        {
            tracing::debug!("dns stub: cannot answer {peer}: {e}");
        }
    }
}

/// The response to one query, or `None` for a message not worth answering (too short to hold a
/// header, or a response).
pub fn answer(query: &[u8], names: &SyntheticNames) -> Option<Vec<u8>> {
    if query.len() < HEADER_LEN {
        return None;
    }
    let flags = u16::from_be_bytes([query[2], query[3]]);
    if flags & 0x8000 != 0 {
        return None;
    }
    let opcode = ((flags >> 11) & 0xF) as u8;
    if opcode != 0 {
        return Some(header_only(query, NOTIMP));
    }
    let questions = u16::from_be_bytes([query[4], query[5]]);
    let (answers, authority) = (
        u16::from_be_bytes([query[6], query[7]]),
        u16::from_be_bytes([query[8], query[9]]),
    );
    if questions != 1 || answers != 0 || authority != 0 {
        return Some(header_only(query, FORMERR));
    }
    let Some((name, end)) = question_name(query) else {
        return Some(header_only(query, FORMERR));
    };
    let Some(fixed) = query.get(end..end + 4) else {
        return Some(header_only(query, FORMERR));
    };
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    let question = &query[HEADER_LEN..end + 4];
    let host = match Host::parse(&name) {
        Ok(host @ Host::Name(_)) => host,
        _ => return Some(response(query, question, NXDOMAIN, None)),
    };
    if qtype != TYPE_A || qclass != CLASS_IN {
        return Some(response(query, question, NOERROR, None));
    }
    match names.address_for(&host) {
        Some(addr) => Some(response(query, question, NOERROR, Some(addr.octets()))),
        None => Some(response(query, question, REFUSED, None)),
    }
}

/// The question's name as dotted text and the offset just past it. Compression pointers (which a
/// question never needs) and labels over 63 bytes are refused, as are names over 255 bytes.
fn question_name(query: &[u8]) -> Option<(String, usize)> {
    let mut at = HEADER_LEN;
    let mut name = String::new();
    loop {
        let len = *query.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        let label = query.get(at..at + len)?;
        if !name.is_empty() {
            name.push('.');
        }
        // Host names are ASCII; anything else fails `Host::parse` and gets NXDOMAIN.
        name.extend(label.iter().map(|&b| b as char));
        at += len;
        if at - HEADER_LEN > 255 {
            return None;
        }
    }
    (!name.is_empty()).then_some((name, at))
}

/// A header with `rcode`, echoing the query's id and RD bit, with no sections.
fn header_only(query: &[u8], rcode: u8) -> Vec<u8> {
    let mut out = header(query, rcode, 0, 0);
    out.truncate(HEADER_LEN);
    out
}

fn header(query: &[u8], rcode: u8, questions: u16, answers: u16) -> Vec<u8> {
    let recursion_desired = query[2] & 0x01;
    let mut out = Vec::with_capacity(HEADER_LEN + 300);
    out.extend_from_slice(&query[0..2]);
    // QR, AA, the client's RD; then RA and the rcode.
    out.push(0x80 | 0x04 | recursion_desired);
    out.push(0x80 | (rcode & 0x0F));
    out.extend_from_slice(&questions.to_be_bytes());
    out.extend_from_slice(&answers.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

fn response(query: &[u8], question: &[u8], rcode: u8, address: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = header(query, rcode, 1, u16::from(address.is_some()));
    out.extend_from_slice(question);
    if let Some(octets) = address {
        // The name, as a pointer to the question's (offset 12).
        out.extend_from_slice(&[0xC0, HEADER_LEN as u8]);
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL_SECONDS.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&octets);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    fn rcode(response: &[u8]) -> u8 {
        response[3] & 0x0F
    }

    #[test]
    fn an_a_question_gets_the_names_synthetic_address() {
        let names = SyntheticNames::default();
        let r = answer(&query("Denied.Example", TYPE_A), &names).unwrap();
        assert_eq!(&r[0..2], &[0x12, 0x34], "the id is echoed");
        assert_eq!(r[2] & 0x80, 0x80, "a response");
        assert_eq!(rcode(&r), NOERROR);
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 1, "one answer");
        assert_eq!(&r[r.len() - 4..], &[198, 18, 0, 2]);
        assert_eq!(
            names.name_of([198, 18, 0, 2].into()).as_deref(),
            Some("denied.example")
        );
    }

    #[test]
    fn other_types_get_no_records_and_bad_input_a_clear_code() {
        let names = SyntheticNames::default();
        let aaaa = answer(&query("a.test", 28), &names).unwrap();
        assert_eq!((rcode(&aaaa), aaaa[7]), (NOERROR, 0));
        let bad_name = answer(&query("bad_name!.test", TYPE_A), &names).unwrap();
        assert_eq!(rcode(&bad_name), NXDOMAIN);
        let long = format!("{}.test", "a".repeat(64));
        assert_eq!(
            rcode(&answer(&query(&long, TYPE_A), &names).unwrap()),
            FORMERR
        );
        let too_long = vec!["a".repeat(60); 5].join(".");
        assert_eq!(
            rcode(&answer(&query(&too_long, TYPE_A), &names).unwrap()),
            FORMERR
        );
        let mut status = query("a.test", TYPE_A);
        status[2] = 0x10; // opcode 2, STATUS
        assert_eq!(rcode(&answer(&status, &names).unwrap()), NOTIMP);
        let mut truncated = query("a.test", TYPE_A);
        truncated.truncate(truncated.len() - 2);
        assert_eq!(rcode(&answer(&truncated, &names).unwrap()), FORMERR);
        assert_eq!(answer(&[0; 5], &names), None, "no header: no answer");
        let mut response = query("a.test", TYPE_A);
        response[2] |= 0x80;
        assert_eq!(
            answer(&response, &names),
            None,
            "responses are never answered"
        );
    }

    #[test]
    fn a_full_table_is_refused() {
        let names = SyntheticNames::with_capacity(1);
        assert_eq!(
            rcode(&answer(&query("a.test", TYPE_A), &names).unwrap()),
            NOERROR
        );
        assert_eq!(
            rcode(&answer(&query("b.test", TYPE_A), &names).unwrap()),
            REFUSED
        );
    }
}
