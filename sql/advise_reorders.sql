-- advise_reorders: (`effect-recon advise`) ledger rows decided by the cut, per partition,
-- consumer and whether they were decided within $window microseconds after their
-- partition changed consumer (a rebalance: a row whose consumer differs from the row
-- decided before it on that partition), with how many of them were reordered: decided
-- after a row of the same order and partition with a larger offset (docs/SEMANTICS.md
-- reorder_suspected). $cut, $window: Int64 microseconds.
WITH l AS (
    SELECT msg_id, order_id, kafka_partition AS p, kafka_offset AS o,
           coalesce(consumer_id, '') AS c, CAST(decided_at AS BIGINT) AS t
    FROM ledger
    WHERE CAST(decided_at AS BIGINT) <= $cut
      AND kafka_partition IS NOT NULL AND kafka_offset IS NOT NULL
),
reordered AS (
    SELECT DISTINCT a.msg_id
    FROM l a JOIN l b ON a.order_id = b.order_id AND a.p = b.p
    WHERE b.o > a.o AND b.t < a.t
),
handoffs AS (
    SELECT msg_id, p, c, t, o,
           CASE WHEN c <> lag(c) OVER (PARTITION BY p ORDER BY t, o) THEN t END AS handoff
    FROM l
),
marked AS (
    SELECT msg_id, p, c, t,
           max(handoff) OVER (PARTITION BY p ORDER BY t, o
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS last_handoff
    FROM handoffs
)
SELECT m.p AS kafka_partition,
       m.c AS consumer_id,
       coalesce(m.t - m.last_handoff <= $window, false) AS after_rebalance,
       count(*) AS messages,
       count(r.msg_id) AS reordered
FROM marked m
LEFT JOIN reordered r ON r.msg_id = m.msg_id
GROUP BY m.p, m.c, coalesce(m.t - m.last_handoff <= $window, false)
