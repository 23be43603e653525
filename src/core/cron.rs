//! Cron expressions for schedules: five fields (minute, hour, day of month, month, day of week), UTC, and the
//! nicknames `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`.
//!
//! Each field is a comma-separated list of `*`, `n`, `a-b`, each with an optional `/step` (`n/step` runs from
//! `n` to the field's end); months take `JAN`–`DEC` and days of the week `SUN`–`SAT` (`0` and `7` are Sunday;
//! `SUN` ending a range is 7, so `FRI-SUN` is Friday to Sunday), in any case. When both day fields are restricted (neither is `*`), a day matches either (the classic cron
//! rule); otherwise both must match. Quartz extensions (`L`, `W`, `#`, `?`, seconds, years) are refused.
//!
//! Written here rather than taken from a crate: `croner` (the best fit, with previous-occurrence search) cost the
//! Worker 23 KB of its gzip budget with `chrono`; this costs a few. `tests/cron_oracle.rs` checks it against
//! `croner` (a dev-dependency) on generated expressions and times.

/// A parsed cron expression (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    days_any: bool,
    weekdays_any: bool,
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// How far a search looks: nine years of days (the rarest expression, February 29th, recurs within eight).
const SEARCH_DAYS: i64 = 9 * 366;

const MINUTE_MS: u64 = 60_000;
const DAY_MINUTES: u64 = 1_440;

impl Cron {
    /// Parses an expression; the error says what is wrong with which field.
    pub fn parse(expr: &str) -> Result<Cron, String> {
        let expr = expr.trim();
        let expanded = match expr.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            _ if expr.starts_with('@') => return Err(format!("unknown nickname {expr:?}")),
            _ => expr,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "it has {} fields; five are needed (minute hour day-of-month month day-of-week)",
                fields.len()
            ));
        }
        let minutes = field(fields[0], "minute", 0, 59, &[])?;
        let hours = field(fields[1], "hour", 0, 23, &[])?;
        let days = field(fields[2], "day of month", 1, 31, &[])?;
        let months = field(fields[3], "month", 1, 12, &MONTHS)?;
        let mut weekdays = field(fields[4], "day of week", 0, 7, &WEEKDAYS)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & 0x7f;
        }
        Ok(Cron {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            days_any: fields[2] == "*",
            weekdays_any: fields[4] == "*",
        })
    }

    /// The latest matching minute at or before `at_ms` (ms since the epoch), within nine years.
    pub fn previous(&self, at_ms: u64) -> Option<u64> {
        let minute = at_ms / MINUTE_MS;
        let mut day = (minute / DAY_MINUTES) as i64;
        let mut limit = (minute % DAY_MINUTES) as u32;
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day) {
                if let Some(m) = self.latest_in_day(limit) {
                    return Some((day as u64 * DAY_MINUTES + m as u64) * MINUTE_MS);
                }
            }
            if day == 0 {
                return None;
            }
            day -= 1;
            limit = DAY_MINUTES as u32 - 1;
        }
        None
    }

    /// The first matching minute after `at_ms`, within nine years.
    pub fn next(&self, at_ms: u64) -> Option<u64> {
        let minute = at_ms / MINUTE_MS + 1;
        let mut day = (minute / DAY_MINUTES) as i64;
        let mut from = (minute % DAY_MINUTES) as u32;
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day) {
                if let Some(m) = self.earliest_in_day(from) {
                    return Some((day as u64 * DAY_MINUTES + m as u64) * MINUTE_MS);
                }
            }
            day += 1;
            from = 0;
        }
        None
    }

    fn day_matches(&self, days_since_epoch: i64) -> bool {
        let (_, month, day) = civil(days_since_epoch);
        if self.months & (1 << month) == 0 {
            return false;
        }
        let weekday = (days_since_epoch + 4).rem_euclid(7) as u32;
        let by_day = self.days & (1 << day) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        match (self.days_any, self.weekdays_any) {
            (false, false) => by_day || by_weekday,
            _ => by_day && by_weekday,
        }
    }

    /// The latest matching minute of the day at or before minute-of-day `limit`.
    fn latest_in_day(&self, limit: u32) -> Option<u32> {
        let (lh, lm) = (limit / 60, limit % 60);
        for h in (0..=lh).rev() {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let top = if h == lh { lm } else { 59 };
            let mask = self.minutes & ((1u64 << (top + 1)) - 1);
            if mask != 0 {
                return Some(h * 60 + 63 - mask.leading_zeros());
            }
        }
        None
    }

    /// The first matching minute of the day at or after minute-of-day `from`.
    fn earliest_in_day(&self, from: u32) -> Option<u32> {
        let (fh, fm) = (from / 60, from % 60);
        for h in fh..24 {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let low = if h == fh { fm } else { 0 };
            let mask = self.minutes & !((1u64 << low) - 1);
            if mask != 0 {
                return Some(h * 60 + mask.trailing_zeros());
            }
        }
        None
    }
}

/// One field's values as bits (bit n: value n).
fn field(text: &str, name: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let err = |why: String| Err(format!("the {name} field {text:?}: {why}"));
    let value = |s: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            // Month names count from 1 (the field's minimum), weekday names from 0.
            return Ok(i as u32 + min);
        }
        match s.parse::<u32>() {
            Ok(v) if (min..=max).contains(&v) && !s.starts_with('+') => Ok(v),
            _ => Err(format!("{s:?} is not a value from {min} to {max}")),
        }
    };
    let mut bits = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => match s.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) && !s.starts_with('+') => (r, n),
                _ => return err(format!("step {s:?} must be a number from 1 to {max}")),
            },
            None => (item, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            // `SUN` ending a range is 7 (`FRI-SUN`: Friday to Sunday).
            let end = if names == WEEKDAYS && b.eq_ignore_ascii_case("SUN") { Ok(7) } else { value(b) };
            let (a, b) = (value(a), end);
            match (a, b) {
                (Ok(a), Ok(b)) if a <= b => (a, b),
                (Ok(a), Ok(b)) => return err(format!("the range {a}-{b} runs backwards")),
                (Err(e), _) | (_, Err(e)) => return err(e),
            }
        } else {
            match value(range) {
                Ok(v) if item.contains('/') => (v, max),
                Ok(v) => (v, v),
                Err(e) => return err(e),
            }
        };
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

/// The civil date (year, month 1–12, day 1–31) of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T00:00:00Z, a Tuesday.
    const DAY0: u64 = 1_796_083_200_000;
    const H: u64 = 3_600_000;

    #[test]
    fn civil_dates_and_weekdays() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil((DAY0 / 86_400_000) as i64), (2026, 12, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(((DAY0 / 86_400_000) as i64 + 4).rem_euclid(7), 2, "a Tuesday");
    }

    #[test]
    fn fields_names_steps_and_nicknames() {
        let c = Cron::parse("*/15 9-17 * JAN,jul mon-fri").unwrap();
        assert_eq!(c.minutes, 1 | 1 << 15 | 1 << 30 | 1 << 45);
        assert_eq!(c.months, 1 << 1 | 1 << 7);
        assert_eq!(c.weekdays, 0b0111110);
        assert_eq!(Cron::parse("0 0 * * 7").unwrap().weekdays, 1, "7 is Sunday");
        assert_eq!(Cron::parse("5/20 * * * *").unwrap().minutes, 1 << 5 | 1 << 25 | 1 << 45);
        assert_eq!(Cron::parse("@daily").unwrap(), Cron::parse("0 0 * * *").unwrap());
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "*/0 * * * *",
            "5-1 * * * *",
            "L * * * *",
            "* * 15W * *",
            "* * * * 1#2",
            "@often",
            "a * * * *",
            "1,,2 * * * *",
            "+1 * * * *",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn previous_and_next_occurrences() {
        let c = Cron::parse("30 9 * * 1-5").unwrap();
        // Tuesday 2026-12-01 12:00: the latest is today 09:30, the next tomorrow 09:30.
        assert_eq!(c.previous(DAY0 + 12 * H), Some(DAY0 + 9 * H + 30 * 60_000));
        assert_eq!(c.next(DAY0 + 12 * H), Some(DAY0 + 24 * H + 9 * H + 30 * 60_000));
        assert_eq!(c.previous(DAY0 + 9 * H + 30 * 60_000), Some(DAY0 + 9 * H + 30 * 60_000), "inclusive");
        assert_eq!(c.next(DAY0 + 9 * H + 30 * 60_000), Some(DAY0 + 33 * H + 30 * 60_000), "exclusive");
        // Saturday 2026-12-05 and Sunday: the previous is Friday's.
        assert_eq!(c.previous(DAY0 + 5 * 24 * H), Some(DAY0 + 3 * 24 * H + 9 * H + 30 * 60_000));
        let leap = Cron::parse("0 0 29 2 *").unwrap();
        assert_eq!(leap.next(DAY0), Some(1_835_395_200_000), "2028-02-29");
        assert_eq!(Cron::parse("0 0 30 2 *").unwrap().next(0), None, "never");
        assert_eq!(Cron::parse("* * * * *").unwrap().previous(59_999), Some(0));
        assert_eq!(Cron::parse("1 * * * *").unwrap().previous(59_999), None, "nothing before the epoch");
    }
}
