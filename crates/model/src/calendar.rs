//! Seconds since the Unix epoch and the UTC calendar, both ways (Howard Hinnant's
//! `civil_from_days` / `days_from_civil`): the management UI shows and reads times, and the
//! Zaqar gateway writes them as Zaqar does. Small enough not to warrant a date crate.

/// A moment in UTC, to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcTime {
    /// The year (proleptic Gregorian).
    pub year: i64,
    /// 1–12.
    pub month: i64,
    /// 1–31.
    pub day: i64,
    /// 0–23.
    pub hour: i64,
    /// 0–59.
    pub minute: i64,
    /// 0–60 (60 only when read: a leap second counts as the next minute's first).
    pub second: i64,
}

impl UtcTime {
    /// The calendar time of `seconds` since the epoch (negative: before it).
    #[must_use]
    pub fn from_epoch(seconds: i64) -> Self {
        let days = seconds.div_euclid(86_400);
        let rest = seconds.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self { year, month, day, hour: rest / 3600, minute: rest % 3600 / 60, second: rest % 60 }
    }

    /// Seconds since the epoch of this calendar time (fields are taken as given: check their
    /// ranges first).
    #[must_use]
    pub fn to_epoch(self) -> i64 {
        let Self { year, month, day, hour, minute, second } = self;
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * 86_400 + hour * 3600 + minute * 60 + second
    }

    /// `YYYY-MM-DD`, then `separator`, then `HH:MM:SS`.
    #[must_use]
    pub fn format(self, separator: char) -> String {
        let Self { year, month, day, hour, minute, second } = self;
        format!("{year:04}-{month:02}-{day:02}{separator}{hour:02}:{minute:02}:{second:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_calendar_times_round_trip() {
        for seconds in [0, -1, 951_782_400, 1_795_723_199, 4_102_444_800, -62_135_596_800] {
            assert_eq!(UtcTime::from_epoch(seconds).to_epoch(), seconds);
        }
        assert_eq!(UtcTime::from_epoch(951_782_400).format('T'), "2000-02-29T00:00:00");
        assert_eq!(UtcTime::from_epoch(-1).format(' '), "1969-12-31 23:59:59");
        assert_eq!(UtcTime::from_epoch(-62_135_596_800).format('T'), "0001-01-01T00:00:00");
    }
}
