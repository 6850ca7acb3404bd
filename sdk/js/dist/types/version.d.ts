/** The SDK's version: package.json's (a test checks they agree). */
export declare const VERSION = "0.1.0";
