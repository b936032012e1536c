//! Wall-clock texts as PVE's Perl prints them, in UTC (the simulated nodes' time zone):
//! `strftime("%F %H:%M:%S")` for migration logs and `scalar(localtime)` for HA status.

/// Days since 1970-01-01 -> (year, month 1-12, day 1-31) (the proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    weekday: usize,
    hour: u64,
    minute: u64,
    second: u64,
}

fn parts(unix: u64) -> Parts {
    let days = (unix / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let of_day = unix % 86_400;
    Parts {
        year,
        month,
        day,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 4) % 7) as usize,
        hour: of_day / 3600,
        minute: of_day % 3600 / 60,
        second: of_day % 60,
    }
}

/// `2026-12-02 01:04:13`
pub fn iso_datetime(unix: u64) -> String {
    let p = parts(unix);
    format!(
        "{}-{:02}-{:02} {:02}:{:02}:{:02}",
        p.year, p.month, p.day, p.hour, p.minute, p.second
    )
}

/// Perl's `scalar(localtime)`: `Wed Dec  2 01:04:13 2026`.
pub fn ctime(unix: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let p = parts(unix);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        DAYS[p.weekday],
        MONTHS[(p.month - 1) as usize],
        p.day,
        p.hour,
        p.minute,
        p.second,
        p.year
    )
}

/// `HH:MM:SS` of a duration, as AbstractMigrate prints it.
pub fn duration(seconds: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_like_perl() {
        // 2026-12-02 01:04:13 UTC, a Wednesday.
        let t = 1_796_173_453;
        assert_eq!(iso_datetime(t), "2026-12-02 01:04:13");
        assert_eq!(ctime(t), "Wed Dec  2 01:04:13 2026");
        assert_eq!(iso_datetime(0), "1970-01-01 00:00:00");
        assert_eq!(ctime(951_782_400), "Tue Feb 29 00:00:00 2000");
        assert_eq!(duration(3725), "01:02:05");
    }
}
