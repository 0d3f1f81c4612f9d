// Starts fauxqs (an SQS emulator from npm) on loopback and prints its port.
// usage: node serve.mjs /path/to/fauxqs/dist/app.js PORT
import { pathToFileURL } from "node:url";

const mod = await import(pathToFileURL(process.argv[2]).href);
const app = mod.buildApp({ logger: false, host: "127.0.0.1" });
await app.listen({ host: "127.0.0.1", port: Number(process.argv[3] || 0) });
process.stdout.write(`listening ${app.server.address().port}\n`);
// Exit with the parent: stdin closes when the Go process goes away.
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
