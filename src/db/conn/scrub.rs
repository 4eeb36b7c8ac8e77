//! Password scrubbing: no message leaves the exporter with a source's secret in it.

/// Removes `password` and any `scheme://user:secret@` secret from a message.
pub(crate) fn scrub(message: &str, password: Option<&str>) -> String {
    let mut text = message.to_string();
    if let Some(pw) = password.filter(|p| !p.is_empty()) {
        text = text.replace(pw, "***");
        let encoded: String = url::form_urlencoded::byte_serialize(pw.as_bytes()).collect();
        text = text.replace(&encoded, "***");
    }
    scrub_userinfo(&text)
}

fn scrub_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        let end = rest.find(|c: char| c == '/' || c.is_whitespace()).unwrap_or(rest.len());
        let authority = &rest[..end];
        if let Some(userinfo_end) = authority.rfind('@') {
            let userinfo = &authority[..userinfo_end];
            match userinfo.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&authority[userinfo_end..]);
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_scrubbed() {
        let s = scrub("failed mysql://u:p%40ss@h/db with p@ss", Some("p@ss"));
        assert!(!s.contains("p@ss") && !s.contains("p%40ss"), "{s}");
        assert_eq!(
            scrub_userinfo("x postgres://u:secret@h:5432/db y"),
            "x postgres://u:***@h:5432/db y"
        );
        assert_eq!(scrub_userinfo("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }
}
