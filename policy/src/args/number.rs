//! Exact comparison of JSON numbers, as text: `1`, `1.0`, `1e0` and `10e-1` are the same number, and
//! `0.1 + 0.2`-style float surprises cannot happen because nothing is converted to a float. A
//! number is read as sign, significant digits and a power of ten. One whose exponent is too large
//! to hold exactly (more than [`MAX_EXPONENT_DIGITS`] digits, i.e. beyond 10^(10^30)) is
//! [`Number::parse`]'s `None`: the argument rules treat it as a number they cannot judge, which
//! always ends in a denial (see `matcher`).

use std::cmp::Ordering;

/// Most digits of an exponent read exactly.
pub const MAX_EXPONENT_DIGITS: usize = 30;

/// A JSON number's exact value: `(-1)^negative × digits × 10^exponent`, where `digits` has no
/// leading or trailing zeros (so each value has one form; zero is no digits and not negative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    negative: bool,
    digits: Vec<u8>,
    exponent: i128,
}

impl Number {
    /// Reads JSON number text (`-?int(.frac)?([eE][+-]?exp)?`, already validated by the strict JSON
    /// parser, or written by fenzi); `None` for text that is not one or is beyond exact range.
    pub fn parse(text: &str) -> Option<Number> {
        let b = text.as_bytes();
        let mut i = 0;
        let negative = b.first() == Some(&b'-');
        if negative {
            i += 1;
        }
        let mut digits = Vec::new();
        let mut exponent: i128 = 0;
        let int_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            digits.push(b[i] - b'0');
            i += 1;
        }
        if i == int_start {
            return None;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            let frac_start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                digits.push(b[i] - b'0');
                exponent -= 1;
                i += 1;
            }
            if i == frac_start {
                return None;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            let exp_negative = match b.get(i) {
                Some(b'-') => {
                    i += 1;
                    true
                }
                Some(b'+') => {
                    i += 1;
                    false
                }
                _ => false,
            };
            let start = i;
            while i < b.len() && b[i] == b'0' {
                i += 1;
            }
            let significant = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start || i - significant > MAX_EXPONENT_DIGITS {
                return None;
            }
            let e: i128 = text[significant..i].parse().unwrap_or(0);
            exponent += if exp_negative { -e } else { e };
        }
        if i != b.len() {
            return None;
        }
        let leading = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..leading);
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        if digits.is_empty() {
            return Some(Number {
                negative: false,
                digits,
                exponent: 0,
            });
        }
        Some(Number {
            negative,
            digits,
            exponent,
        })
    }

    /// Whether the value has no fractional part (JSON Schema's `integer`: `1.0` and `1e2` are
    /// integers, `1.5` is not).
    pub fn is_integer(&self) -> bool {
        self.exponent >= 0
    }

    /// The power of ten of the most significant digit, plus one (`None` for zero): numbers with a
    /// larger magnitude have a larger one.
    fn magnitude(&self) -> Option<i128> {
        (!self.digits.is_empty()).then(|| self.digits.len() as i128 + self.exponent)
    }

    fn cmp_magnitude(&self, other: &Number) -> Ordering {
        match (self.magnitude(), other.magnitude()) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(a), Some(b)) if a != b => a.cmp(&b),
            // Same leading power: compare digit by digit (a missing digit is a zero).
            _ => {
                let n = self.digits.len().max(other.digits.len());
                for k in 0..n {
                    let a = self.digits.get(k).copied().unwrap_or(0);
                    let b = other.digits.get(k).copied().unwrap_or(0);
                    if a != b {
                        return a.cmp(&b);
                    }
                }
                Ordering::Equal
            }
        }
    }
}

impl std::fmt::Display for Number {
    /// The value as JSON number text: plain decimals for everyday magnitudes (`100`, `0.01`,
    /// `-2.5`), an exponent beyond them (`1e400`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        let sign = if self.negative { "-" } else { "" };
        let digits: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let len = self.digits.len() as i128;
        match self.exponent {
            e if (0..=20).contains(&e) => write!(f, "{sign}{digits}{}", "0".repeat(e as usize)),
            e if e < 0 && -e < len => {
                let point = (len + e) as usize;
                write!(f, "{sign}{}.{}", &digits[..point], &digits[point..])
            }
            e if e < 0 && -e - len <= 20 => {
                write!(f, "{sign}0.{}{digits}", "0".repeat((-e - len) as usize))
            }
            e => write!(f, "{sign}{digits}e{e}"),
        }
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Number) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Number) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Number {
        Number::parse(text).unwrap_or_else(|| panic!("{text} does not parse"))
    }

    #[test]
    fn the_same_value_written_differently_is_equal() {
        for same in [
            ["1", "1.0", "1e0"],
            ["1", "10e-1", "0.1e1"],
            ["100", "1e2", "1E+2"],
            ["0", "-0", "0.000e99"],
            ["-2.5", "-25e-1", "-0.25E1"],
        ] {
            for other in &same[1..] {
                assert_eq!(n(same[0]), n(other), "{} vs {other}", same[0]);
            }
        }
    }

    #[test]
    fn ordering_is_exact_where_floats_are_not() {
        assert!(n("0.30000000000000004") > n("0.3"));
        assert!(n("9007199254740993") > n("9007199254740992"));
        assert!(n("1e400") > n("9e399"));
        assert!(n("-1e400") < n("-9e399"));
        assert!(n("1e-400") > n("0"));
        assert!(n("-1e-400") < n("0"));
        assert!(n("12.5") < n("13"));
        assert!(n("-12.5") > n("-13"));
        assert!(n("0.001") < n("0.01"));
        let exp30 = format!("1e{}", "9".repeat(30));
        assert!(n(&exp30) > n("1e400"));
    }

    #[test]
    fn display_is_json_number_text_of_the_same_value() {
        for (text, shown) in [
            ("100", "100"),
            ("1e2", "100"),
            ("0.01", "0.01"),
            ("-2.50", "-2.5"),
            ("12.5", "12.5"),
            ("1e400", "1e400"),
            ("1e-400", "1e-400"),
            ("0", "0"),
        ] {
            assert_eq!(n(text).to_string(), shown, "{text}");
            assert_eq!(n(shown), n(text));
        }
    }

    #[test]
    fn integer_means_no_fractional_part() {
        for yes in ["1", "1.0", "1e2", "-3", "0", "0.0", "2.50e1"] {
            assert!(n(yes).is_integer(), "{yes}");
        }
        for no in ["1.5", "1e-1", "-0.25", "25e-1"] {
            assert!(!n(no).is_integer(), "{no}");
        }
    }

    #[test]
    fn text_that_is_not_a_number_or_is_beyond_exact_range_is_none() {
        for bad in [
            "", "-", "1.", ".5", "1e", "1e+", "01x", "abc", "1 ", "+1", "NaN",
        ] {
            assert_eq!(Number::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Number::parse(&format!("1e{}", "1".repeat(31))), None);
        // Leading zeros of an exponent do not count towards its size.
        assert!(Number::parse(&format!("1e{}5", "0".repeat(100))).is_some());
    }
}
