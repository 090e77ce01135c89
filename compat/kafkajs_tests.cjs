// kafkajs 2.2.4: run as `node kafkajs_tests.cjs BOOTSTRAP TEST` (kafkajs must be
// resolvable: NODE_PATH points at its install).
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const [bootstrap, test] = process.argv.slice(2);
// SHALE_SASL="mechanism:user:password" authenticates (SASL_PLAINTEXT).
const sasl = process.env.SHALE_SASL && (([mechanism, username, password]) => ({ mechanism, username, password }))(process.env.SHALE_SASL.split(':'));
const kafka = new Kafka({ clientId: 'kafkajs-compat', brokers: bootstrap.split(','), logLevel: logLevel.WARN, retry: { retries: 10 }, ...(sasl ? { sasl } : {}) });

function assert(ok, what) { if (!ok) throw new Error(what); }

async function eventually(fn, what, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try { if (await fn()) return; } catch (e) { last = e; }
    await new Promise(r => setTimeout(r, 300));
  }
  throw new Error(`${what} not reached (last error: ${last})`);
}

async function create(topic, numPartitions = 1) {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions }], waitForLeaders: true });
  await admin.disconnect();
}

// Reads `expected` records from the beginning (kafkajs reads read_committed by default).
async function consume(topic, expected, groupId = `kjs-${Math.random()}`) {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  let done;
  const finished = new Promise(r => { done = r; });
  await consumer.run({ eachMessage: async ({ partition, message }) => {
    got.push({ partition, key: message.key, value: message.value.toString(), offset: message.offset });
    if (got.length >= expected) done();
  } });
  await Promise.race([finished, new Promise(r => setTimeout(r, 60000))]);
  await consumer.disconnect();
  return got;
}

const tests = {
  async codecs() {
    for (const [name, codec] of [['none', CompressionTypes.None], ['gzip', CompressionTypes.GZIP]]) {
      const topic = `kjs-${name}`;
      await create(topic, 2);
      const producer = kafka.producer();
      await producer.connect();
      const values = Array.from({ length: 500 }, (_, i) => `${name}-${i}`);
      for (let i = 0; i < values.length; i += 100) {
        await producer.send({ topic, compression: codec, acks: -1,
          messages: values.slice(i, i + 100).map(value => ({ value })) });
      }
      await producer.disconnect();
      const got = await consume(topic, values.length);
      assert(got.length === values.length, `${name}: ${got.length} of ${values.length} back`);
      assert(JSON.stringify(got.map(m => m.value).sort()) === JSON.stringify([...values].sort()), `${name}: content differs`);
    }
  },

  async keyed() {
    const topic = 'kjs-keyed';
    await create(topic, 5);
    const producer = kafka.producer();
    await producer.connect();
    const keys = Array.from({ length: 200 }, (_, i) => `key-${i}`);
    await producer.send({ topic, messages: keys.map(key => ({ key, value: 'v' })) });
    await producer.disconnect();
    const got = await consume(topic, keys.length);
    // Printed for the orchestrator, which checks them against murmur2.
    console.log(JSON.stringify(got.map(m => [m.key.toString(), m.partition])));
  },

  async group_rebalance() {
    const topic = 'kjs-group', groupId = 'kjs-group-g';
    await create(topic, 4);
    const assigned = { a: 0, b: 0 };
    const member = (name) => {
      const c = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500, rebalanceTimeout: 10000 });
      c.on(c.events.GROUP_JOIN, e => { assigned[name] = (e.payload.memberAssignment[topic] || []).length; });
      return c;
    };
    const a = member('a'), b = member('b');
    for (const c of [a, b]) {
      await c.connect();
      await c.subscribe({ topic, fromBeginning: true });
      await c.run({ eachMessage: async () => {} });
    }
    await eventually(() => assigned.a === 2 && assigned.b === 2, 'two members with two partitions each');
    await b.disconnect();
    await eventually(() => assigned.a === 4, 'the remaining member owning all four');
    await a.disconnect();
  },

  async admin_ops() {
    const admin = kafka.admin();
    await admin.connect();
    const topic = 'kjs-admin';
    await admin.createTopics({ topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] }], waitForLeaders: true });
    const described = await admin.describeConfigs({ resources: [{ type: 2, name: topic }], includeSynonyms: false });
    const entry = described.resources[0].configEntries.find(e => e.configName === 'retention.ms');
    assert(entry && entry.configValue === '3600000', `retention.ms: ${JSON.stringify(entry)}`);
    await admin.alterConfigs({ resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }] }] });
    const again = await admin.describeConfigs({ resources: [{ type: 2, name: topic }], includeSynonyms: false });
    assert(again.resources[0].configEntries.find(e => e.configName === 'retention.ms').configValue === '7200000', 'alter did not take');
    await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] });
    const md = await admin.fetchTopicMetadata({ topics: [topic] });
    assert(md.topics[0].partitions.length === 4, `partitions: ${md.topics[0].partitions.length}`);
    const offsets = await admin.fetchTopicOffsetsByTimestamp(topic, Date.now() - 60000);
    assert(offsets.length === 4, 'offsets by timestamp');
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ value: 'x', partition: 0 }] });
    await producer.disconnect();
    const got = await consume(topic, 1, 'kjs-admin-g');
    assert(got.length === 1, 'one record back');
    const groups = await admin.listGroups();
    assert(groups.groups.some(g => g.groupId === 'kjs-admin-g'), `listGroups: ${JSON.stringify(groups)}`);
    const desc = await admin.describeGroups(['kjs-admin-g']);
    assert(desc.groups[0].groupId === 'kjs-admin-g' && desc.groups[0].errorCode === 0, `describeGroups: ${JSON.stringify(desc)}`);
    await admin.deleteTopics({ topics: [topic] });
    await eventually(async () => !(await admin.listTopics()).includes(topic), 'topic deleted');
    await admin.disconnect();
  },

  // Under SHALE_SASL with a session lifetime shorter than the pauses: the same
  // producer keeps sending, re-authenticating on its connection (KIP-368).
  async reauth() {
    const topic = 'kjs-reauth';
    await create(topic);
    const producer = kafka.producer();
    await producer.connect();
    for (let i = 0; i < 3; i++) {
      await producer.send({ topic, acks: -1, messages: [{ value: `r${i}` }] });
      await new Promise(r => setTimeout(r, 2500));
    }
    await producer.disconnect();
    const got = await consume(topic, 3);
    assert(got.map(m => m.value).join() === 'r0,r1,r2', `got ${JSON.stringify(got.map(m => m.value))}`);
  },

  // Under SHALE_SASL with a wrong password: connecting fails as an authentication error.
  async refused() {
    const admin = kafka.admin();
    try {
      await admin.connect();
      await admin.listTopics();
    } catch (e) {
      assert(/SASL|uthentication/.test(`${e.name} ${e.message}`), `unexpected error: ${e}`);
      return;
    }
    throw new Error('a wrong password was accepted');
  },

  // 3 brokers (ids 0-2): a partition on brokers 0 and 1 moves to 2 and 1 through the
  // reassignment admin calls, between two halves of its records; none is lost.
  async reassign() {
    const topic = 'kjs-reassign';
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, replicaAssignment: [{ partition: 0, replicas: [0, 1] }] }], waitForLeaders: true });
    const producer = kafka.producer();
    await producer.connect();
    const values = Array.from({ length: 200 }, (_, i) => `m${i}`);
    await producer.send({ topic, acks: -1, messages: values.slice(0, 100).map(value => ({ value })) });
    await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: [2, 1] }] }] });
    await eventually(async () => {
      const { topics } = await admin.listPartitionReassignments({});
      const md = await admin.fetchTopicMetadata({ topics: [topic] });
      const p = md.topics[0].partitions[0];
      return topics.length === 0 && JSON.stringify(p.replicas) === '[2,1]' && p.isr.length === 2;
    }, 'the reassignment to finish');
    // A bad target is refused with Kafka's error.
    let refused = null;
    try {
      await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: [2, 2] }] }] });
    } catch (e) {
      // kafkajs gathers the partitions' errors in a KafkaJSAggregateError.
      refused = (e.errors || [e]).map(x => x.type || x.name).join();
    }
    assert(refused === 'INVALID_REPLICA_ASSIGNMENT', `a duplicate replica was not refused: ${refused}`);
    await producer.send({ topic, acks: -1, messages: values.slice(100).map(value => ({ value })) });
    await producer.disconnect();
    await admin.disconnect();
    const got = await consume(topic, values.length);
    assert(got.map(m => m.value).join() === values.join(), `got ${got.length} records, not in order`);
  },

  async idempotent() {
    const topic = 'kjs-idempotent';
    await create(topic, 2);
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const values = Array.from({ length: 1000 }, (_, i) => `i${i}`);
    for (let i = 0; i < values.length; i += 100) {
      await producer.send({ topic, acks: -1, messages: values.slice(i, i + 100).map(value => ({ value })) });
    }
    await producer.disconnect();
    const got = await consume(topic, values.length);
    assert(got.length === values.length, `${got.length} of ${values.length}`);
    assert(new Set(got.map(m => m.value)).size === values.length, 'duplicates');
  },

  // producer.transaction(): a commit, an abort, and offsets sent in a transaction.
  async transactions() {
    const [src, dst, groupId] = ['kjs-txn-in', 'kjs-txn-out', 'kjs-txn-group'];
    await create(src, 1);
    await create(dst, 2);
    const producer = kafka.producer({ transactionalId: 'kjs-txn', idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const send = async (tag, n, commit, offsets) => {
      const txn = await producer.transaction();
      try {
        await txn.send({ topic: dst, messages: Array.from({ length: n }, (_, i) => ({ key: `${i}`, value: `${tag}-${i}` })) });
        if (offsets) {
          await txn.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: src, partitions: [{ partition: 0, offset: offsets }] }] });
        }
        await (commit ? txn.commit() : txn.abort());
      } catch (e) {
        await txn.abort();
        throw e;
      }
    };
    await send('first', 100, true);
    await send('aborted', 50, false, '7');
    await send('last', 10, true, '42');
    await producer.disconnect();
    const got = await consume(dst, 110);
    assert(got.length === 110, `${got.length} of 110 committed records`);
    assert(!got.some(m => m.value.startsWith('aborted')), 'an aborted record was read');
    const admin = kafka.admin();
    await admin.connect();
    const [offsets] = await admin.fetchOffsets({ groupId, topics: [src] });
    await admin.disconnect();
    assert(offsets.partitions[0].offset === '42', `committed offset ${JSON.stringify(offsets)}`);
  },
};

const started = Date.now();
tests[test]().then(() => {
  console.log(`ok kafkajs ${test} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  process.exit(0);
}, (e) => {
  console.error(`kafkajs ${test} failed:`, e);
  process.exit(1);
});
