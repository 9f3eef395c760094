//! `INCRBYFLOAT`'s arithmetic, exactly as Redis does it on x86-64: in C's `long double`
//! (the x87 80-bit format: a 64-bit significand, round half to even), read with `strtold`
//! (decimal, hexadecimal, `inf`; no leading space, no `nan`, nothing after the number), and
//! printed with `%.17Lf`, trailing zeros and a trailing point removed, `-0` as `0`. So
//! `10.5` plus `0.1` is `10.6`, and `3010.6` plus `0` is `3010.60000000000000009`, as in
//! Redis.
//!
//! Invariant: every result is the correctly rounded one. Rust has no 80-bit float, so the
//! values are kept as a 64-bit significand and a binary exponent, and each step (reading,
//! adding, printing) is computed exactly with big integers and then rounded once. Results
//! in the subnormal range keep full precision (Redis's would lose some): a difference no
//! real increment meets.

use std::cmp::Ordering;

/// A `long double`: finite (`significand * 2^exponent`, the significand's top bit set unless
/// zero), infinite, or not a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongDouble {
    /// A finite value: `significand * 2^exponent`, negated if `negative`.
    Finite {
        /// The sign.
        negative: bool,
        /// The significand, top bit set unless zero.
        significand: u64,
        /// The binary exponent of the significand's lowest bit.
        exponent: i64,
    },
    /// Plus or minus infinity.
    Infinite {
        /// The sign.
        negative: bool,
    },
    /// Not a number.
    NotANumber,
}

/// Past this binary exponent (of the top bit) a value is infinite: `LDBL_MAX` is just below
/// `2^16384`.
const MAX_EXPONENT: i64 = 16384;
/// Below this (of the top bit) a value is too small even for a subnormal: it reads as zero.
const MIN_EXPONENT: i64 = -16445;

impl LongDouble {
    /// Positive zero.
    pub const ZERO: LongDouble = LongDouble::Finite {
        negative: false,
        significand: 0,
        exponent: 0,
    };

    /// The number `text` holds, as Redis's `string2ld` reads one: `None` if it is not one
    /// (or reads as a NaN, or overflows or underflows as `strtold` reports it).
    pub fn parse(text: &[u8]) -> Option<LongDouble> {
        if text.is_empty() || text.len() >= 5 * 1024 {
            return None;
        }
        let (negative, body) = match text[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let lower = body.to_ascii_lowercase();
        if lower == b"inf" || lower == b"infinity" {
            return Some(LongDouble::Infinite { negative });
        }
        let (digits, fraction_digits, exponent, radix_bits) =
            if lower.starts_with(b"0x") && lower.len() > 2 {
                let (mantissa, exponent) = split_exponent(&lower[2..], b'p')?;
                let (digits, fraction) = digits(mantissa, 16)?;
                (digits, fraction, exponent, true)
            } else {
                let (mantissa, exponent) = split_exponent(&lower, b'e')?;
                let (digits, fraction) = digits(mantissa, 10)?;
                (digits, fraction, exponent, false)
            };
        let mut value = Big::zero();
        for digit in &digits {
            value.mul_small(if radix_bits { 16 } else { 10 });
            value.add_small(*digit);
        }
        if value.is_zero() {
            return Some(LongDouble::Finite {
                negative,
                significand: 0,
                exponent: 0,
            });
        }
        let rounded = if radix_bits {
            let exponent = exponent.saturating_sub(4 * fraction_digits as i64);
            round(&value, exponent, false)
        } else {
            let exponent = exponent.saturating_sub(fraction_digits as i64);
            // Far past the range either way: settled without the arithmetic.
            // Leading zeros are no part of the magnitude.
            let significant = digits.iter().skip_while(|digit| **digit == 0).count();
            let magnitude = exponent.saturating_add(significant as i64);
            if magnitude > 5000 {
                return None;
            }
            if magnitude < -5000 {
                return None;
            }
            decimal(value, exponent)
        };
        LongDouble::finite_or_range(negative, rounded)
    }

    /// A rounded value, unless it overflows or underflows (`strtold`'s `ERANGE` cases that
    /// `string2ld` refuses).
    fn finite_or_range(negative: bool, (significand, exponent): (u64, i64)) -> Option<LongDouble> {
        let top = exponent + 63;
        if !(MIN_EXPONENT..MAX_EXPONENT).contains(&top) {
            return None;
        }
        Some(LongDouble::Finite {
            negative,
            significand,
            exponent,
        })
    }

    /// `self + other`, rounded once.
    pub fn plus(self, other: LongDouble) -> LongDouble {
        use LongDouble::*;
        match (self, other) {
            (NotANumber, _) | (_, NotANumber) => NotANumber,
            (Infinite { negative: a }, Infinite { negative: b }) if a != b => NotANumber,
            (Infinite { negative }, _) | (_, Infinite { negative }) => Infinite { negative },
            (
                Finite {
                    negative: a_negative,
                    significand: a,
                    exponent: a_exponent,
                },
                Finite {
                    negative: b_negative,
                    significand: b,
                    exponent: b_exponent,
                },
            ) => {
                if a == 0 || b == 0 {
                    return match (a, b) {
                        // -0 + -0 is -0; any other sum of zeros is +0.
                        (0, 0) => Finite {
                            negative: a_negative && b_negative,
                            significand: 0,
                            exponent: 0,
                        },
                        (0, _) => other,
                        _ => self,
                    };
                }
                let base = a_exponent.min(b_exponent);
                let a_big = Big::from_u64(a).shl((a_exponent - base) as usize);
                let b_big = Big::from_u64(b).shl((b_exponent - base) as usize);
                let (negative, sum) = if a_negative == b_negative {
                    (a_negative, a_big.add(&b_big))
                } else {
                    match a_big.cmp(&b_big) {
                        Ordering::Equal => return LongDouble::ZERO,
                        Ordering::Greater => (a_negative, a_big.sub(&b_big)),
                        Ordering::Less => (b_negative, b_big.sub(&a_big)),
                    }
                };
                let (significand, exponent) = round(&sum, base, false);
                if exponent + 63 >= MAX_EXPONENT {
                    return Infinite { negative };
                }
                Finite {
                    negative,
                    significand,
                    exponent,
                }
            }
        }
    }

    /// The value if it is finite.
    pub fn finite(self) -> Option<LongDouble> {
        matches!(self, LongDouble::Finite { .. }).then_some(self)
    }

    /// `%.17Lf`, trailing zeros and point removed, `-0` as `0`: how Redis writes the
    /// result of `INCRBYFLOAT`. A finite value only (an infinite one writes `inf`).
    pub fn to_human(self) -> String {
        let LongDouble::Finite {
            negative,
            significand,
            exponent,
        } = self
        else {
            return "inf".into();
        };
        const DECIMALS: usize = 17;
        let mut scaled = Big::from_u64(significand);
        // The value times 10^17, rounded half to even to an integer.
        let units = if exponent >= 0 {
            scaled = scaled.shl(exponent as usize);
            scaled.mul_pow10(DECIMALS as u32);
            scaled
        } else {
            scaled.mul_pow10(DECIMALS as u32);
            let shift = (-exponent) as usize;
            let mut units = scaled.shr(shift);
            let half = scaled.bit(shift - 1);
            let rest = scaled.any_below(shift - 1);
            if half && (rest || units.bit(0)) {
                units.add_small(1);
            }
            units
        };
        let mut digits = units.to_decimal();
        if digits.len() <= DECIMALS {
            digits = format!("{}{digits}", "0".repeat(DECIMALS + 1 - digits.len()));
        }
        let (whole, fraction) = digits.split_at(digits.len() - DECIMALS);
        let fraction = fraction.trim_end_matches('0');
        let text = if fraction.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{fraction}")
        };
        if negative && text != "0" {
            format!("-{text}")
        } else {
            text
        }
    }
}

/// `text` cut at its exponent marker: the mantissa, and the exponent (0 if none; clamped,
/// as only its range matters past a point).
fn split_exponent(text: &[u8], marker: u8) -> Option<(&[u8], i64)> {
    let Some(at) = text.iter().position(|byte| *byte == marker) else {
        return Some((text, 0));
    };
    let (sign, digits) = match text.get(at + 1) {
        Some(b'-') => (-1, &text[at + 2..]),
        Some(b'+') => (1, &text[at + 2..]),
        _ => (1, &text[at + 1..]),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Past a million either way the value is out of range whatever its digits (at most
    // 5 KiB of them): clamped there, so the arithmetic on it cannot overflow.
    let exponent = digits.iter().fold(0i64, |exponent, digit| {
        (exponent * 10 + i64::from(digit - b'0')).min(1_000_000)
    });
    Some((&text[..at], sign * exponent))
}

/// The digit values of a mantissa (`digits[.digits]`, at least one digit), and how many
/// follow the point.
fn digits(mantissa: &[u8], radix: u32) -> Option<(Vec<u32>, usize)> {
    let mut values = Vec::with_capacity(mantissa.len());
    let mut fraction = None;
    for byte in mantissa {
        match (byte, fraction) {
            (b'.', None) => fraction = Some(0),
            _ => {
                values.push(char::from(*byte).to_digit(radix)?);
                if let Some(count) = &mut fraction {
                    *count += 1;
                }
            }
        }
    }
    (!values.is_empty()).then_some((values, fraction.unwrap_or(0)))
}

/// `value * 10^exponent`, rounded to a 64-bit significand.
fn decimal(mut value: Big, exponent: i64) -> (u64, i64) {
    if exponent >= 0 {
        value.mul_pow10(exponent as u32);
        return round(&value, 0, false);
    }
    let mut divisor = Big::from_u64(1);
    divisor.mul_pow10((-exponent) as u32);
    // Scaled so the quotient has at least 66 bits: 64 and a rounding bit, and one spare.
    let shift = divisor.bit_length() as i64 - value.bit_length() as i64 + 66;
    let (numerator, divisor) = if shift >= 0 {
        (value.shl(shift as usize), divisor)
    } else {
        (value, divisor.shl((-shift) as usize))
    };
    let (quotient, exact) = numerator.divide(&divisor);
    round(&quotient, -shift, !exact)
}

/// `value * 2^exponent` (`value` not zero) rounded half to even to 64 significant bits,
/// `inexact` telling of nonzero bits below `value`.
fn round(value: &Big, exponent: i64, inexact: bool) -> (u64, i64) {
    let length = value.bit_length();
    if length <= 64 {
        let shift = 64 - length;
        return (value.low_u64() << shift, exponent - shift as i64);
    }
    let shift = length - 64;
    let mut significand = value.shr(shift).low_u64();
    let half = value.bit(shift - 1);
    let rest = inexact || value.any_below(shift - 1);
    let mut exponent = exponent + shift as i64;
    if half && (rest || significand & 1 == 1) {
        significand = significand.wrapping_add(1);
        if significand == 0 {
            significand = 1 << 63;
            exponent += 1;
        }
    }
    (significand, exponent)
}

/// An unsigned big integer, 32-bit limbs, least significant first, no high zero limb.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn zero() -> Big {
        Big(Vec::new())
    }

    fn from_u64(value: u64) -> Big {
        let mut big = Big(vec![value as u32, (value >> 32) as u32]);
        big.trim();
        big
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn low_u64(&self) -> u64 {
        let limb = |at: usize| u64::from(self.0.get(at).copied().unwrap_or(0));
        limb(0) | limb(1) << 32
    }

    fn bit_length(&self) -> usize {
        self.0
            .last()
            .map_or(0, |top| self.0.len() * 32 - top.leading_zeros() as usize)
    }

    fn bit(&self, at: usize) -> bool {
        self.0
            .get(at / 32)
            .is_some_and(|limb| limb >> (at % 32) & 1 == 1)
    }

    /// Whether any bit below `at` is set.
    fn any_below(&self, at: usize) -> bool {
        let whole = (at / 32).min(self.0.len());
        self.0[..whole].iter().any(|limb| *limb != 0)
            || self
                .0
                .get(at / 32)
                .is_some_and(|limb| limb & ((1u32 << (at % 32)) - 1) != 0)
    }

    fn mul_small(&mut self, factor: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let product = u64::from(*limb) * u64::from(factor) + carry;
            *limb = product as u32;
            carry = product >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn add_small(&mut self, addend: u32) {
        let mut carry = u64::from(addend);
        for limb in &mut self.0 {
            if carry == 0 {
                break;
            }
            let sum = u64::from(*limb) + carry;
            *limb = sum as u32;
            carry = sum >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow10(&mut self, mut power: u32) {
        while power >= 9 {
            self.mul_small(1_000_000_000);
            power -= 9;
        }
        self.mul_small(10u32.pow(power));
    }

    fn shl(&self, bits: usize) -> Big {
        if self.is_zero() {
            return Big::zero();
        }
        let (limbs, bits) = (bits / 32, bits % 32);
        let mut out = vec![0u32; limbs];
        let mut carry = 0u32;
        for limb in &self.0 {
            out.push(if bits == 0 {
                *limb
            } else {
                limb << bits | carry
            });
            carry = if bits == 0 { 0 } else { limb >> (32 - bits) };
        }
        out.push(carry);
        let mut big = Big(out);
        big.trim();
        big
    }

    fn shr(&self, bits: usize) -> Big {
        let (limbs, bits) = (bits / 32, bits % 32);
        let rest = self.0.get(limbs..).unwrap_or(&[]);
        let mut out: Vec<u32> = (0..rest.len())
            .map(|at| {
                let high = rest.get(at + 1).copied().unwrap_or(0);
                if bits == 0 {
                    rest[at]
                } else {
                    rest[at] >> bits | high << (32 - bits)
                }
            })
            .collect();
        out.truncate(rest.len());
        let mut big = Big(out);
        big.trim();
        big
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn add(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
        let mut carry = 0u64;
        for at in 0..self.0.len().max(other.0.len()) {
            let sum = u64::from(self.0.get(at).copied().unwrap_or(0))
                + u64::from(other.0.get(at).copied().unwrap_or(0))
                + carry;
            out.push(sum as u32);
            carry = sum >> 32;
        }
        out.push(carry as u32);
        let mut big = Big(out);
        big.trim();
        big
    }

    /// `self - other`, `self` not the smaller.
    fn sub(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for at in 0..self.0.len() {
            let mut difference =
                i64::from(self.0[at]) - i64::from(other.0.get(at).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(difference < 0);
            if difference < 0 {
                difference += 1 << 32;
            }
            out.push(difference as u32);
        }
        let mut big = Big(out);
        big.trim();
        big
    }

    /// The quotient, and whether the division is exact. For quotients of a few dozen bits:
    /// binary long division, one bit a step.
    fn divide(&self, divisor: &Big) -> (Big, bool) {
        let mut remainder = self.clone();
        let mut quotient = Big::zero();
        let steps = self.bit_length().saturating_sub(divisor.bit_length()) + 1;
        for bit in (0..steps).rev() {
            let shifted = divisor.shl(bit);
            if remainder.cmp(&shifted) != Ordering::Less {
                remainder = remainder.sub(&shifted);
                quotient = quotient.add(&Big::from_u64(1).shl(bit));
            }
        }
        (quotient, remainder.is_zero())
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut value = self.clone();
        let mut chunks = Vec::new();
        while !value.is_zero() {
            let mut remainder = 0u64;
            for limb in value.0.iter_mut().rev() {
                let current = remainder << 32 | u64::from(*limb);
                *limb = (current / 1_000_000_000) as u32;
                remainder = current % 1_000_000_000;
            }
            value.trim();
            chunks.push(remainder);
        }
        let mut text = chunks.pop().expect("nonzero").to_string();
        for chunk in chunks.iter().rev() {
            text.push_str(&format!("{chunk:09}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::LongDouble;

    fn sum(a: &str, b: &str) -> Option<String> {
        let a = LongDouble::parse(a.as_bytes())?;
        let b = LongDouble::parse(b.as_bytes())?;
        Some(a.plus(b).finite()?.to_human())
    }

    /// Leading zeros do not count toward a number's magnitude: `0…01e4900` (112 zeros) is
    /// `1e4900`, which a long double holds, as Redis reads it.
    #[test]
    fn leading_zeros_are_not_magnitude() {
        let padded = format!("{}1e4900", "0".repeat(112));
        assert_eq!(
            LongDouble::parse(padded.as_bytes()),
            LongDouble::parse(b"1e4900")
        );
        assert!(LongDouble::parse(b"1e4900").is_some());
    }

    /// Every expected answer is redis-server 7.0's.
    #[test]
    fn sums_are_written_as_redis_writes_them() {
        assert_eq!(sum("10.5", "0.1").as_deref(), Some("10.6"));
        assert_eq!(
            sum("10.6", "3.0e3").as_deref(),
            Some("3010.60000000000000009")
        );
        assert_eq!(sum("0", "3.0e3").as_deref(), Some("3000"));
        assert_eq!(sum("0", "0x10").as_deref(), Some("16"));
        assert_eq!(sum("0", ".1").as_deref(), Some("0.1"));
        assert_eq!(sum("0", "-0").as_deref(), Some("0"));
        assert_eq!(
            sum("0", "1e300").as_deref(),
            Some(
                "1000000000000000000008997324079559193870523944273290747938260082321265646596\
                 1809357558491520837504971903503725086142748359035925561846729839130962605207\
                 4864628732713564184365329408425510760601678972665293237003055138294762099454\
                 0294772781889620606179267611627097410650567187386105690089424915104006144"
            )
        );
        assert_eq!(sum("0", "inf"), None);
        for refused in [
            "abc",
            " 1",
            "1 ",
            "",
            "nan",
            "1e",
            "0x",
            ".",
            "1e99999",
            "1e-99999",
            "1e99999999999999999999999",
            "0x1p99999999999999999999999",
            "0x1p-99999999999999999999999",
            "0x1p-16500",
        ] {
            assert_eq!(LongDouble::parse(refused.as_bytes()), None, "{refused:?}");
        }
    }
}
