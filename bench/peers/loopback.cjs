// Preloaded into peers written for node (node --require bench/peers/loopback.cjs): every TCP
// listen() binds 127.0.0.1 whatever host the server asked for, so a peer that listens on all
// interfaces (soul does) is reachable from loopback only. Unix-socket paths are left alone.
'use strict';
const net = require('net');

const HOST = '127.0.0.1';
const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function (...args) {
    const first = args[0];
    if (first !== null && typeof first === 'object' && !(first instanceof net.Server) && !first.path) {
        args[0] = { ...first, host: HOST };
    } else if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
        if (typeof args[1] === 'string' || args[1] === undefined || args[1] === null) {
            args[1] = HOST;
        } else {
            args.splice(1, 0, HOST);
        }
    } else if (first === undefined || typeof first === 'function') {
        args.unshift(0, HOST); // listen() / listen(cb): random port, loopback
    }
    return listen.apply(this, args);
};
