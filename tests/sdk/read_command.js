// Reads one command as a CloudEvents consumer would: the message (a JSON
// file holding its key, value and headers as Kafka gave them) goes through
// the official JavaScript SDK's Kafka binding, strictly validated, and
// what the SDK made of it is printed as one JSON object. Exit 1 when the
// SDK refuses the message, with its reason.
"use strict";
const fs = require("fs");
const { Kafka, CloudEvent } = require("cloudevents");

const message = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
try {
  const event = Kafka.toEvent({
    key: message.key,
    value: Buffer.from(message.value, "utf8"),
    headers: message.headers,
  });
  // toEvent() builds the event without checks: judge it as a producer's.
  new CloudEvent({ ...event }, true).validate();
  process.stdout.write(
    JSON.stringify({
      specversion: event.specversion,
      id: event.id,
      source: event.source,
      type: event.type,
      time: event.time,
      datacontenttype: event.datacontenttype,
      data: event.data,
      data_is_object: typeof event.data === "object" && event.data !== null,
      idempotencykey: event.idempotencykey,
      stewardtoken: event.stewardtoken,
    }) + "\n",
  );
} catch (e) {
  const why = e.errors ? JSON.stringify(e.errors) : "";
  process.stderr.write(`the CloudEvents SDK refused the command: ${e.message} ${why}\n`);
  process.exit(1);
}
