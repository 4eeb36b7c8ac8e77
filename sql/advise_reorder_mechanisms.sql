-- advise_reorder_mechanisms: (`effect-recon advise`) every ledger row decided by the cut
-- that was reordered (decided after a row of the same order and partition with a larger
-- offset), classified by its fingerprint in the ledger, first match wins:
--   RETRY_TOPIC     it came through another topic than a row it follows (a retry topic or
--                   a dead-letter replay decided it late);
--   OLD_OWNER_LATE  its consumer's rows on the partition (it and its neighbours of the
--                   same consumer) sit between two runs of rows of one other consumer: the
--                   partition had passed to a new owner and the old one still wrote (a
--                   zombie past max.poll.interval.ms, or offsets committed before a thread
--                   pool processed them);
--   BEFORE_HANDOFF  another consumer decided the row it follows ahead of its turn, and its
--                   own consumer owned the partition from then on (processing not
--                   serialized per key before a handoff, the row redelivered to the new
--                   owner);
--   SAME_CONSUMER   one consumer decided both out of offset order (a thread pool without
--                   per-key ordering).
-- And, as kind PRODUCER_ORDER, every row whose offset contradicts the order of the status
-- changes it and another row of its order and partition announce (an earlier change at a
-- larger offset): the producer reordered them (retries without idempotence).
-- One row per kind with its count. $cut: Int64 microseconds.
WITH l AS (
    SELECT msg_id, order_id, expected_status, coalesce(topic, '') AS topic,
           kafka_partition AS p, kafka_offset AS o, coalesce(consumer_id, '') AS c,
           CAST(decided_at AS BIGINT) AS t
    FROM ledger
    WHERE CAST(decided_at AS BIGINT) <= $cut
      AND kafka_partition IS NOT NULL AND kafka_offset IS NOT NULL
),
runs AS (
    -- A run: the partition's consecutive rows of one consumer, numbered in time order.
    SELECT *, sum(starts_run) OVER (PARTITION BY p ORDER BY t, o ROWS UNBOUNDED PRECEDING) AS run
    FROM (
        SELECT msg_id, order_id, topic, p, o, c, t,
               CASE WHEN c = lag(c) OVER (PARTITION BY p ORDER BY t, o) THEN 0 ELSE 1 END
                   AS starts_run
        FROM l
    )
),
run_consumers AS (
    SELECT p, run, min(c) AS c FROM runs GROUP BY p, run
),
ordered AS (
    -- stray: the row's run sits between two runs of one other consumer, who owned the
    -- partition before and after it.
    SELECT r.msg_id, r.order_id, r.topic, r.p, r.o, r.c, r.t,
           coalesce(prev_run.c = next_run.c, false) AS stray
    FROM runs r
    LEFT JOIN run_consumers prev_run ON prev_run.p = r.p AND prev_run.run = r.run - 1
    LEFT JOIN run_consumers next_run ON next_run.p = r.p AND next_run.run = r.run + 1
),
reordered AS (
    SELECT a.msg_id,
           bool_or(b.topic <> a.topic) AS other_topic,
           bool_or(b.c <> a.c) AS other_consumer,
           bool_or(a.stray) AS stray
    FROM ordered a JOIN ordered b ON a.order_id = b.order_id AND a.p = b.p
    WHERE b.o > a.o AND b.t < a.t
    GROUP BY a.msg_id
),
announced AS (
    SELECT l.msg_id, l.order_id, l.p, l.o, min(CAST(h.changed_at AS BIGINT)) AS changed
    FROM l JOIN status_history h ON h.order_id = l.order_id AND h.status = l.expected_status
    WHERE CAST(h.changed_at AS BIGINT) <= $cut
    GROUP BY l.msg_id, l.order_id, l.p, l.o
),
producer AS (
    SELECT DISTINCT a.msg_id
    FROM announced a JOIN announced b ON a.order_id = b.order_id AND a.p = b.p
    WHERE a.o > b.o AND a.changed < b.changed
)
SELECT kind, count(*) AS messages
FROM (
    SELECT CASE
               WHEN other_topic THEN 'RETRY_TOPIC'
               WHEN stray THEN 'OLD_OWNER_LATE'
               WHEN other_consumer THEN 'BEFORE_HANDOFF'
               ELSE 'SAME_CONSUMER'
           END AS kind
    FROM reordered
    UNION ALL
    SELECT 'PRODUCER_ORDER' AS kind FROM producer
)
GROUP BY kind
