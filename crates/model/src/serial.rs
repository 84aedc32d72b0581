//! Serial-number arithmetic (RFC 1982) over 32-bit counters: AMQP 1.0 delivery-counts and
//! transfer ids wrap at 2^32, and comparing or subtracting them must wrap too.

/// `a - b` as a signed distance: positive when `a` is ahead of `b` (less than 2^31 steps),
/// negative when behind, as RabbitMQ's `serial_number:diff/2`.
#[must_use]
pub fn serial_diff(a: u32, b: u32) -> i32 {
    // Two's complement: the wrapped difference read as signed is the RFC 1982 distance.
    i32::from_ne_bytes(a.wrapping_sub(b).to_ne_bytes())
}

/// AMQP 1.0's link-credit of a sender (2.6.7): delivery-count(rcv) + link-credit(rcv) -
/// delivery-count(snd), in serial-number arithmetic; no credit when that is negative (the
/// receiver lowered its credit while deliveries were in flight), as RabbitMQ's
/// `amqp10_util:link_credit_snd/3`.
#[must_use]
pub fn link_credit_snd(delivery_count_rcv: u32, link_credit_rcv: u32, delivery_count_snd: u32) -> u32 {
    let credit = serial_diff(delivery_count_rcv.wrapping_add(link_credit_rcv), delivery_count_snd);
    u32::try_from(credit).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_wrap_at_two_to_the_32() {
        assert_eq!(serial_diff(5, 3), 2);
        assert_eq!(serial_diff(3, 5), -2);
        assert_eq!(serial_diff(2, u32::MAX - 4), 7, "across the wrap");
        assert_eq!(serial_diff(u32::MAX - 4, 2), -7);
        assert_eq!(serial_diff(0, 0), 0);
    }

    #[test]
    fn link_credit_follows_rabbitmq() {
        let start = u32::MAX - 4; // RabbitMQ's initial delivery-count, 2^32 - 5
        assert_eq!(link_credit_snd(start, 2, start), 2);
        assert_eq!(link_credit_snd(0, 2, start), 7, "a receiver that starts at 0 (rhea)");
        assert_eq!(link_credit_snd(u32::MAX - 2, 2, start), 4, "2^32 - 3");
        assert_eq!(link_credit_snd(start.wrapping_sub(5), 2, start), 0, "behind: no credit");
        assert_eq!(link_credit_snd(start, 3, start.wrapping_add(1)), 2, "one delivery in flight");
        assert_eq!(link_credit_snd(start, 0, start.wrapping_add(1)), 0, "credit lowered under it");
    }
}
