package dev.steward.test.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

/**
 * The registry's index of run-time changeable settings. Apicurio builds it
 * with a Quarkus extension whose build-time half Maven Central does not
 * serve; the tests change no setting at run time, so the index is empty
 * (every setting keeps the value it starts with).
 */
public class NoDynamicProperties {
    @Produces
    @Singleton
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
