\set base random(1, 1000000000000000)
\set a0 random(1, 100000)
\set a1 random(1, 100000)
\set a2 random(1, 100000)
\set a3 random(1, 100000)
\set a4 random(1, 100000)
\set a5 random(1, 100000)
\set a6 random(1, 100000)
\set a7 random(1, 100000)
\set a8 random(1, 100000)
\set a9 random(1, 100000)
\set a10 random(1, 100000)
\set a11 random(1, 100000)
\set a12 random(1, 100000)
\set a13 random(1, 100000)
\set a14 random(1, 100000)
\set a15 random(1, 100000)
\set a16 random(1, 100000)
\set a17 random(1, 100000)
\set a18 random(1, 100000)
\set a19 random(1, 100000)
\set a20 random(1, 100000)
\set a21 random(1, 100000)
\set a22 random(1, 100000)
\set a23 random(1, 100000)
\set a24 random(1, 100000)
\set a25 random(1, 100000)
\set a26 random(1, 100000)
\set a27 random(1, 100000)
\set a28 random(1, 100000)
\set a29 random(1, 100000)
\set a30 random(1, 100000)
\set a31 random(1, 100000)
\set a32 random(1, 100000)
\set a33 random(1, 100000)
\set a34 random(1, 100000)
\set a35 random(1, 100000)
\set a36 random(1, 100000)
\set a37 random(1, 100000)
\set a38 random(1, 100000)
\set a39 random(1, 100000)
\set a40 random(1, 100000)
\set a41 random(1, 100000)
\set a42 random(1, 100000)
\set a43 random(1, 100000)
\set a44 random(1, 100000)
\set a45 random(1, 100000)
\set a46 random(1, 100000)
\set a47 random(1, 100000)
\set a48 random(1, 100000)
\set a49 random(1, 100000)
\set a50 random(1, 100000)
\set a51 random(1, 100000)
\set a52 random(1, 100000)
\set a53 random(1, 100000)
\set a54 random(1, 100000)
\set a55 random(1, 100000)
\set a56 random(1, 100000)
\set a57 random(1, 100000)
\set a58 random(1, 100000)
\set a59 random(1, 100000)
\set a60 random(1, 100000)
\set a61 random(1, 100000)
\set a62 random(1, 100000)
\set a63 random(1, 100000)
\startpipeline
BEGIN;
INSERT INTO pgb_inbox (consumer_id, message_id, state) SELECT 1, :base || '-' || g, 'd' FROM generate_series(1, 64) g ORDER BY 2 ON CONFLICT (message_id, consumer_id) DO NOTHING;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a0;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a1;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a2;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a3;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a4;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a5;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a6;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a7;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a8;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a9;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a10;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a11;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a12;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a13;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a14;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a15;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a16;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a17;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a18;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a19;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a20;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a21;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a22;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a23;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a24;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a25;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a26;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a27;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a28;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a29;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a30;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a31;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a32;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a33;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a34;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a35;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a36;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a37;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a38;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a39;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a40;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a41;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a42;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a43;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a44;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a45;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a46;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a47;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a48;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a49;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a50;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a51;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a52;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a53;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a54;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a55;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a56;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a57;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a58;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a59;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a60;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a61;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a62;
RELEASE SAVEPOINT m;
SAVEPOINT m;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a63;
RELEASE SAVEPOINT m;
COMMIT;
\endpipeline
