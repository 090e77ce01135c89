//! kcat-style output formats for `shale consume --format`:
//! `%t` topic, `%p` partition, `%o` offset, `%k` key, `%s` value, `%T` timestamp (ms),
//! `%h` headers (`k=v` comma-separated), `%K` / `%S` key / value length (-1 if null),
//! `%%` a percent sign; escapes `\n`, `\t`, `\r`, `\\`.

use crate::ConsumedRecord;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    Headers,
    KeyLen,
    ValueLen,
}

#[derive(Debug, Clone)]
pub struct Format(Vec<Token>);

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut tokens = Vec::new();
        let mut lit = Vec::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            let token = match c {
                '%' => match chars.next() {
                    Some('t') => Token::Topic,
                    Some('p') => Token::Partition,
                    Some('o') => Token::Offset,
                    Some('k') => Token::Key,
                    Some('s') => Token::Value,
                    Some('T') => Token::Timestamp,
                    Some('h') => Token::Headers,
                    Some('K') => Token::KeyLen,
                    Some('S') => Token::ValueLen,
                    Some('%') => {
                        lit.push(b'%');
                        continue;
                    }
                    other => {
                        return Err(format!(
                            "unknown format token %{}",
                            other.map(String::from).unwrap_or_default()
                        ));
                    }
                },
                '\\' => {
                    match chars.next() {
                        Some('n') => lit.push(b'\n'),
                        Some('t') => lit.push(b'\t'),
                        Some('r') => lit.push(b'\r'),
                        Some('\\') => lit.push(b'\\'),
                        Some(other) => {
                            lit.push(b'\\');
                            lit.extend_from_slice(other.to_string().as_bytes());
                        }
                        None => lit.push(b'\\'),
                    }
                    continue;
                }
                other => {
                    lit.extend_from_slice(other.to_string().as_bytes());
                    continue;
                }
            };
            if !lit.is_empty() {
                tokens.push(Token::Literal(std::mem::take(&mut lit)));
            }
            tokens.push(token);
        }
        if !lit.is_empty() {
            tokens.push(Token::Literal(lit));
        }
        Ok(Format(tokens))
    }
}

impl Format {
    pub fn write(&self, out: &mut Vec<u8>, r: &ConsumedRecord) {
        use std::io::Write;
        let len = |b: &Option<bytes::Bytes>| b.as_ref().map_or(-1, |b| b.len() as i64);
        for t in &self.0 {
            match t {
                Token::Literal(l) => out.extend_from_slice(l),
                Token::Topic => out.extend_from_slice(r.topic.as_bytes()),
                Token::Partition => write!(out, "{}", r.partition).unwrap_or(()),
                Token::Offset => write!(out, "{}", r.offset).unwrap_or(()),
                Token::Key => out.extend_from_slice(r.key.as_deref().unwrap_or_default()),
                Token::Value => out.extend_from_slice(r.value.as_deref().unwrap_or_default()),
                Token::Timestamp => write!(out, "{}", r.timestamp).unwrap_or(()),
                Token::KeyLen => write!(out, "{}", len(&r.key)).unwrap_or(()),
                Token::ValueLen => write!(out, "{}", len(&r.value)).unwrap_or(()),
                Token::Headers => {
                    for (i, (k, v)) in r.headers.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(k.as_bytes());
                        out.push(b'=');
                        out.extend_from_slice(v.as_deref().unwrap_or_default());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn renders_every_token() {
        let r = ConsumedRecord {
            topic: "t".into(),
            partition: 2,
            offset: 42,
            timestamp: 1000,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![
                ("a".into(), Some(Bytes::from_static(b"1"))),
                ("b".into(), None),
            ],
        };
        let f: Format = "%t|%p|%o|%k|%s|%T|%h|%K|%S|%%\\t\\n".parse().unwrap();
        let mut out = Vec::new();
        f.write(&mut out, &r);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "t|2|42|k||1000|a=1,b=|1|-1|%\t\n"
        );
        assert!("%x".parse::<Format>().is_err());
    }
}
