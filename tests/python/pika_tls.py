"""pika over amqps: a PLAIN login over TLS, then SASL EXTERNAL with a client certificate whose
CN names the user. Arguments: amqps port, CA bundle, client certificate, client key.
Exit status 0 = pass."""
import ssl
import sys

import pika


def roundtrip(params: pika.ConnectionParameters, body: bytes) -> None:
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    queue = channel.queue_declare(queue="", exclusive=True).method.queue
    channel.basic_publish(exchange="", routing_key=queue, body=body)
    for _ in range(50):
        method, _, got = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            assert got == body, got
            break
        connection.sleep(0.1)
    else:
        raise AssertionError("the message did not come back")
    connection.close()


def main(port: int, ca: str, cert: str, key: str) -> None:
    context = ssl.create_default_context(cafile=ca)
    plain = pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                      ssl_options=pika.SSLOptions(context, "localhost"),
                                      credentials=pika.PlainCredentials("guest", "guest"))
    roundtrip(plain, b"over tls")

    with_cert = ssl.create_default_context(cafile=ca)
    with_cert.load_cert_chain(cert, key)
    external = pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                         ssl_options=pika.SSLOptions(with_cert, "localhost"),
                                         credentials=pika.credentials.ExternalCredentials())
    roundtrip(external, b"external")

    # EXTERNAL is not offered without a client certificate: pika finds no usable mechanism.
    no_cert = pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                        ssl_options=pika.SSLOptions(context, "localhost"),
                                        credentials=pika.credentials.ExternalCredentials(),
                                        connection_attempts=1)
    try:
        pika.BlockingConnection(no_cert)
    except pika.exceptions.AMQPError as error:
        print(f"refused without a certificate: {type(error).__name__}")
    else:
        raise AssertionError("EXTERNAL without a client certificate was accepted")
    print("pika tls ok")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
